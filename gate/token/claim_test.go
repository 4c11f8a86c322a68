package token_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/gate/token"
)

// A claim ticket names its promotion: the claim deadline to the
// nanosecond, which VerifyClaimTicket gives back; it expires at that
// deadline and verifies as no other ticket, nor any other as it.
func TestClaimTicketCarriesItsDeadline(t *testing.T) {
	s := newSigner(t, "k")
	deadline := epoch.Add(15*time.Minute + 123456789*time.Nanosecond)
	tk, err := s.ClaimTicket("g", "b", deadline)
	require.NoError(t, err)
	assert.Equal(t, strconv.FormatInt(deadline.UnixNano(), 10)+".b.", tk[:strings.LastIndexByte(tk, '.')+1], "<exp ns>.<id>.<mac>")
	again, err := s.ClaimTicket("g", "b", deadline.In(time.FixedZone("x", 3600)))
	require.NoError(t, err)
	assert.Equal(t, tk, again, "deterministic: a retried webhook carries the same link")

	id, got, ok := s.VerifyClaimTicket(tk, "g")
	require.True(t, ok)
	assert.Equal(t, "b", id)
	assert.True(t, deadline.Equal(got), "the deadline to the nanosecond")

	other, err := s.ClaimTicket("g", "b", deadline.Add(time.Millisecond))
	require.NoError(t, err)
	assert.NotEqual(t, tk, other, "another promotion, another ticket")

	ws, err := s.Ticket(token.PurposeWS, "g", "b")
	require.NoError(t, err)
	leave, err := s.Ticket(token.PurposeLeave, "g", "b")
	require.NoError(t, err)
	at := func(now time.Time) *token.Signer {
		v, err := token.NewSignerWithOptions(secretOf("k"), token.Options{Now: func() time.Time { return now }})
		require.NoError(t, err)
		return v
	}
	exp, _, _ := strings.Cut(tk, ".")
	for _, tc := range []struct {
		name, ticket, gate string
		signer             *token.Signer
	}{
		{"another gate", tk, "h", s},
		{"at its deadline", tk, "g", at(deadline)},
		{"another key", tk, "g", newSigner(t, "o")},
		{"deadline moved a nanosecond", strings.Replace(tk, exp, strconv.FormatInt(deadline.UnixNano()+1, 10), 1), "g", s},
		{"deadline in seconds", strings.Replace(tk, exp, strconv.FormatInt(deadline.Unix()+1, 10), 1), "g", s},
		{"another id", strings.Replace(tk, ".b.", ".c.", 1), "g", s},
		{"a websocket ticket", ws, "g", s},
		{"a leave ticket", leave, "g", s},
		{"a session token", mustSign(t, s, "b"), "g", s},
		{"leading zero", "0" + tk, "g", s},
		{"empty", "", "g", s},
		{"too long", strings.Repeat("1", token.MaxLength+1), "g", s},
	} {
		_, _, ok := tc.signer.VerifyClaimTicket(tc.ticket, tc.gate)
		assert.False(t, ok, tc.name)
	}
	_, _, ok = at(deadline.Add(-time.Nanosecond)).VerifyClaimTicket(tk, "g")
	assert.True(t, ok, "valid until its deadline")
	_, ok = s.VerifyTicket(tk, token.PurposeClaim, "g")
	assert.False(t, ok, "VerifyTicket never takes a claim ticket")
	_, ok = s.VerifyTicket(tk, token.PurposeWS, "g")
	assert.False(t, ok)

	for _, bad := range []time.Time{epoch, epoch.Add(-time.Second), {}, time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)} {
		_, err := s.ClaimTicket("g", "b", bad)
		assert.Error(t, err, "expiry %v", bad)
	}
}

func mustSign(t *testing.T, s *token.Signer, id string) string {
	t.Helper()
	tok, err := s.Sign(id)
	require.NoError(t, err)
	return tok
}

// A secret rotation during a claim window keeps the links already mailed
// (and a ticket issued a moment before): they verify under the previous
// secret on a signer that has it, and not on one without it.
func TestTicketsVerifyAcrossARotation(t *testing.T) {
	at := func() time.Time { return epoch }
	old, err := token.NewSignerWithOptions(secretOf("o"), token.Options{Now: at})
	require.NoError(t, err)
	rotated, err := token.NewSignerWithOptions(secretOf("n"), token.Options{Previous: secretOf("o"), Now: at})
	require.NoError(t, err)
	bare, err := token.NewSignerWithOptions(secretOf("n"), token.Options{Now: at})
	require.NoError(t, err)

	deadline := epoch.Add(15 * time.Minute)
	link, err := old.ClaimTicket("g", "b", deadline)
	require.NoError(t, err)
	id, got, ok := rotated.VerifyClaimTicket(link, "g")
	require.True(t, ok, "a claim link mailed before the rotation")
	assert.Equal(t, "b", id)
	assert.True(t, got.Equal(deadline))
	_, _, ok = bare.VerifyClaimTicket(link, "g")
	assert.False(t, ok, "verified without the previous secret")

	ws, err := old.Ticket(token.PurposeWS, "g", "b")
	require.NoError(t, err)
	id, ok = rotated.VerifyTicket(ws, token.PurposeWS, "g")
	require.True(t, ok, "a ticket issued before the rotation")
	assert.Equal(t, "b", id)
	_, ok = bare.VerifyTicket(ws, token.PurposeWS, "g")
	assert.False(t, ok)
	_, ok = rotated.VerifyTicket(ws, token.PurposeLeave, "g")
	assert.False(t, ok, "another purpose")
}

// CheckClaimTicket says why it refuses: expired only for a ticket this
// signer (or its previous secret) issued for that gate, whose deadline
// has passed; invalid for every other, expired or not, so that a forged
// or mangled link is never called expired.
func TestCheckClaimTicketSaysWhy(t *testing.T) {
	deadline := epoch.Add(15 * time.Minute)
	at := func(now time.Time, previous string) *token.Signer {
		o := token.Options{Now: func() time.Time { return now }}
		if previous != "" {
			o.Previous = secretOf(previous)
		}
		v, err := token.NewSignerWithOptions(secretOf("k"), o)
		require.NoError(t, err)
		return v
	}
	s := at(epoch, "")
	tk, err := s.ClaimTicket("g", "b", deadline)
	require.NoError(t, err)
	old, err := token.NewSignerWithOptions(secretOf("o"), token.Options{Now: func() time.Time { return epoch }})
	require.NoError(t, err)
	oldTk, err := old.ClaimTicket("g", "b", deadline)
	require.NoError(t, err)
	ws, err := s.Ticket(token.PurposeWS, "g", "b")
	require.NoError(t, err)
	mac := tk[strings.LastIndexByte(tk, '.')+1:]
	later, past := at(deadline, ""), at(deadline.Add(time.Hour), "")
	for _, tc := range []struct {
		name, ticket, gate string
		signer             *token.Signer
		want               error
	}{
		{"valid", tk, "g", s, nil},
		{"a nanosecond before its deadline", tk, "g", at(deadline.Add(-time.Nanosecond), ""), nil},
		{"at its deadline", tk, "g", later, token.ErrTicketExpired},
		{"an hour late", tk, "g", past, token.ErrTicketExpired},
		{"late, issued before a rotation", oldTk, "g", at(deadline, "o"), token.ErrTicketExpired},
		{"late, of a secret this signer never had", oldTk, "g", past, token.ErrTicketInvalid},
		{"late, for another gate", tk, "h", past, token.ErrTicketInvalid},
		{"late, another id", strings.Replace(tk, ".b.", ".c.", 1), "g", past, token.ErrTicketInvalid},
		{"late, MAC cut short", tk[:len(tk)-3], "g", past, token.ErrTicketInvalid},
		{"late, MAC changed", strings.Replace(tk, mac, strings.Repeat("A", len(mac)), 1), "g", past, token.ErrTicketInvalid},
		{"a forged deadline in the past", "1." + tk[strings.IndexByte(tk, '.')+1:], "g", s, token.ErrTicketInvalid},
		{"a websocket ticket", ws, "g", s, token.ErrTicketInvalid},
		{"empty", "", "g", s, token.ErrTicketInvalid},
		{"script", `<script>alert(1)</script>`, "g", s, token.ErrTicketInvalid},
		{"too long", strings.Repeat("1", token.MaxLength+1), "g", past, token.ErrTicketInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, got, err := tc.signer.CheckClaimTicket(tc.ticket, tc.gate)
			_, _, ok := tc.signer.VerifyClaimTicket(tc.ticket, tc.gate)
			assert.Equal(t, tc.want == nil, ok, "VerifyClaimTicket agrees")
			if tc.want == nil {
				require.NoError(t, err)
				assert.Equal(t, "b", id)
				assert.True(t, got.Equal(deadline))
				return
			}
			assert.ErrorIs(t, err, tc.want)
			assert.Empty(t, id, "a refused ticket names no session")
			assert.True(t, got.IsZero())
		})
	}
}
