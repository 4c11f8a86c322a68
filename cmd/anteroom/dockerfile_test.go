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

// The Dockerfile builds what the README promises: a static binary (no cgo),
// on the Go release go.mod asks for, into a runtime image that runs as a
// non-root user, with the database in a volume that user owns; and the
// build context leaves databases and VCS data out. (No container engine
// runs in CI: this guards the file against drift; see the README.)
func TestDockerfile(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", name))
		require.NoError(t, err)
		return string(b)
	}
	df := read("Dockerfile")
	gomod := read("go.mod")

	goLine := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(gomod)
	require.NotNil(t, goLine)
	assert.Regexp(t, `(?m)^ARG GO_VERSION=`+regexp.QuoteMeta(goLine[1])+`$`, df, "the builder runs the Go release of go.mod")

	stages := regexp.MustCompile(`(?m)^FROM (\S+)(?: AS (\S+))?$`).FindAllStringSubmatch(df, -1)
	require.Len(t, stages, 2, "multi-stage: a builder, then the runtime image")
	assert.Contains(t, stages[0][1], "golang:${GO_VERSION}")
	assert.Equal(t, "gcr.io/distroless/static-debian12:nonroot", stages[1][1], "a static runtime image without a shell")

	build := regexp.MustCompile(`(?m)^RUN CGO_ENABLED=0 go build .* ./cmd/anteroom`).FindString(df)
	assert.NotEmpty(t, build, "the binary is built without cgo (modernc.org/sqlite is pure Go)")
	assert.Contains(t, build, "-X main.version=")

	runtime := df[strings.LastIndex(df, "\nFROM "):]
	assert.Regexp(t, `(?m)^USER 65532:65532$`, runtime, "runs as nonroot")
	assert.NotRegexp(t, `(?m)^USER (0|root)`, runtime)
	assert.Contains(t, runtime, "--chown=65532:65532 /out/data /data", "the database directory belongs to that user")
	assert.Contains(t, runtime, "ANTEROOM_DATABASE=/data/anteroom.db")
	assert.Contains(t, runtime, "ANTEROOM_LISTEN=0.0.0.0:8080", "reachable from outside the container")
	assert.Contains(t, runtime, `ENTRYPOINT ["/usr/local/bin/anteroom"]`)

	ignore := strings.Fields(read(".dockerignore"))
	for _, p := range []string{".git", "*.db", "*.db-wal", "*.db-shm", "*.db.lock"} {
		assert.Contains(t, ignore, p, ".dockerignore leaves %s out of the build context", p)
	}
	for _, p := range ignore {
		for _, needed := range []string{"go.mod", "go.sum", "cmd", "static", "session", "gate", "config.example.yaml"} {
			assert.NotEqual(t, needed, strings.Trim(p, "/"), ".dockerignore must not leave out %s", needed)
		}
	}
}
