package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// githubAnchor is the anchor GitHub gives a Markdown heading: lower case,
// punctuation dropped (but '-' and '_'), spaces as '-'.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 0x7f:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchorsOf lists the anchors of a Markdown file's headings (outside code
// blocks).
func anchorsOf(t *testing.T, path string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	out := map[string]bool{}
	fenced := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if !fenced && strings.HasPrefix(line, "#") {
			out[githubAnchor(strings.TrimLeft(line, "#"))] = true
		}
	}
	return out
}

// TestREADMELinksStayInTheRepo: every link of the README points inside the
// repository (a relative path that exists, or an anchor of a heading that
// exists there), never to another site.
func TestREADMELinksStayInTheRepo(t *testing.T) {
	root := filepath.Join("..", "..")
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	links := regexp.MustCompile(`\]\(([^)\s]+)\)`).FindAllStringSubmatch(string(data), -1)
	require.NotEmpty(t, links)
	for _, m := range links {
		link := m[1]
		if !assert.NotRegexp(t, `^[a-zA-Z][a-zA-Z0-9+.-]*:`, link, "README links only inside the repository") {
			continue
		}
		file, anchor, _ := strings.Cut(link, "#")
		target := filepath.Join(root, "README.md")
		if file != "" {
			target = filepath.Join(root, filepath.FromSlash(file))
			if _, err := os.Stat(target); !assert.NoError(t, err, "README links to %s", link) {
				continue
			}
		}
		if anchor != "" {
			assert.True(t, anchorsOf(t, target)[anchor], "README links to %s: no such heading", link)
		}
	}
}
