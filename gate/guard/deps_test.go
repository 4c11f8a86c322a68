package guard_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nonStdDeps returns the non-standard packages pkg imports, directly or not,
// as a host app building it would get them: `go list -deps` without -test,
// so the heavy imports of this package's tests do not count.
func nonStdDeps(t *testing.T, pkg string) []string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("go is not on PATH in CI: %v", err)
		}
		t.Skipf("go is not on PATH: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return strings.Fields(string(out))
}

func TestImportsStayLight(t *testing.T) {
	allowed := map[string]bool{
		"github.com/anteroomhq/anteroom/gate/guard": true,
		"github.com/anteroomhq/anteroom/gate/token": true,
		"github.com/anteroomhq/anteroom/gate/wire":  true, // standard library and session only itself
		"github.com/anteroomhq/anteroom/session":    true,
		"github.com/anteroomhq/anteroom/static":     true, // standard library only itself
	}
	deps := nonStdDeps(t, "github.com/anteroomhq/anteroom/gate/guard")
	require.Contains(t, deps, "github.com/anteroomhq/anteroom/session")
	for _, d := range deps {
		for _, heavy := range []string{"modernc.org/", "github.com/labstack/", "github.com/coder/"} {
			assert.False(t, strings.HasPrefix(d, heavy), "gate/guard must not depend on %s", d)
		}
		assert.True(t, allowed[d], "gate/guard depends on %s, beyond the standard library and session, gate/token, gate/wire, static", d)
	}
}
