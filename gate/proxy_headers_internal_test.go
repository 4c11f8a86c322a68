package gate

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/anteroomhq/anteroom/gate/token"
	"github.com/anteroomhq/anteroom/gate/wire"
)

// The ?session= values a proxied request carries are verified up to
// wire.MaxCookies, as its cookies are, not one MAC per parameter: a query
// of 1,000 session parameters cost 1,000 verifications (2,000 MACs with a
// previous secret), about 40 times forwarding a plain request, on bypassed
// paths that need no session. Past the cap every further session parameter
// is dropped unverified, so that no token reaches the app however many
// come before it; the others stay byte for byte.
func TestSessionParamsAreVerifiedUpToTheCap(t *testing.T) {
	signer, err := token.NewSigner([]byte(strings.Repeat("s", token.MinSecretLength)))
	assert.NoError(t, err)
	real, err := signer.Sign("visitor")
	assert.NoError(t, err)
	calls := 0
	verify := func(v string) bool {
		calls++
		_, ok := signer.Verify(v)
		return ok
	}

	// The usual query: the token goes, the app's own session stays.
	calls = 0
	assert.Equal(t, "a=1&session=app-own&b=2", withoutSessionParam("a=1&session="+real+"&session=app-own&b=2", verify))
	assert.Equal(t, 2, calls)

	// A flood: at most the cap verified (those that do not verify stay),
	// the token after it dropped all the same, the other parameters kept.
	var parts []string
	for i := 0; i < 1000; i++ {
		parts = append(parts, "session=x.1."+strings.Repeat("A", 43))
	}
	parts = append(parts, "keep=1", "session="+real, "sess%69on="+real, "also=2")
	calls = 0
	got := withoutSessionParam(strings.Join(parts, "&"), verify)
	want := strings.Join(append(parts[:wire.MaxCookies:wire.MaxCookies], "keep=1", "also=2"), "&")
	assert.True(t, got == want, "the verified ones that do not verify and the others kept, every later session parameter dropped: %d bytes left, want %d", len(got), len(want))
	assert.LessOrEqual(t, calls, wire.MaxCookies, "verifications")

	// Under the cap nothing that fails to verify is dropped.
	calls = 0
	few := strings.Repeat("session=mine&", wire.MaxCookies) + "x=1"
	assert.Equal(t, few, withoutSessionParam(few, verify))
	assert.Equal(t, wire.MaxCookies, calls)
}
