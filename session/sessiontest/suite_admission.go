package sessiontest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
)

// admissionStore returns the harness's Store as a session.AdmissionStore,
// and skips the test for a Store without it (a wrapper hiding it; both of
// anteroom's Stores implement it, which they assert at compile time).
func admissionStore(t *testing.T, h *harness) session.AdmissionStore {
	t.Helper()
	a, ok := h.store.(session.AdmissionStore)
	if !ok {
		t.Skipf("%T does not implement session.AdmissionStore", h.store)
	}
	return a
}

// testAdmissions checks the admission records: one per session
// incarnation, redeemed once (also across a restart and under 100
// concurrent redeems), unknown and expired jtis not found, the leeway's
// boundary, and the update's prune in chunks that spares live sessions.
func testAdmissions(t *testing.T, open Opener) {
	h := newHarness(t, open)
	ctx := h.ctx
	cfg := GateConfig(gateName, 100)
	now := h.clock.Now()
	join := func(id string) session.Session {
		t.Helper()
		s, err := h.store.Join(ctx, cfg, id, now)
		require.NoError(t, err)
		return s
	}
	rec := func(jti string, s session.Session, ttl time.Duration) session.Admission {
		return session.Admission{ID: jti, Gate: gateName, Session: s.ID, Position: s.Position, IssuedAt: now, Expires: now.Add(ttl)}
	}
	a := join("alice")
	st := admissionStore(t, h)

	got, err := st.IssueAdmission(ctx, rec("jti-alice", a, 5*time.Minute))
	require.NoError(t, err)
	assert.Equal(t, "jti-alice", got.ID)
	assert.True(t, got.Expires.Equal(now.Add(5*time.Minute)))
	assert.True(t, got.Redeemed.IsZero())
	again, err := st.IssueAdmission(ctx, rec("jti-other", a, time.Hour))
	require.NoError(t, err)
	assert.Equal(t, "jti-alice", again.ID, "one admission per session: asking again returns the first")
	assert.True(t, again.Expires.Equal(got.Expires))

	// Malformed records are refused.
	for name, bad := range map[string]session.Admission{
		"no jti":        rec("", a, time.Minute),
		"jti with dot":  rec("a.b", a, time.Minute),
		"bad gate":      {ID: "x", Gate: "no/slash", Session: "s", Position: 1, IssuedAt: now, Expires: now.Add(time.Minute)},
		"no position":   {ID: "x", Gate: gateName, Session: "s", IssuedAt: now, Expires: now.Add(time.Minute)},
		"expires first": rec("x", a, -time.Minute),
	} {
		_, err := st.IssueAdmission(ctx, bad)
		assert.ErrorIs(t, err, session.ErrInvalidArgument, name)
	}

	// Redeemed once, also across a restart.
	r, err := st.RedeemAdmission(ctx, "jti-alice", now.Add(time.Minute))
	require.NoError(t, err)
	assert.Equal(t, "alice", r.Session)
	assert.Equal(t, gateName, r.Gate)
	assert.True(t, r.Redeemed.Equal(now.Add(time.Minute)))
	_, err = st.RedeemAdmission(ctx, "jti-alice", now.Add(time.Minute))
	assert.ErrorIs(t, err, session.ErrAlreadyRedeemed)
	h.reopen()
	st = admissionStore(t, h)
	_, err = st.RedeemAdmission(ctx, "jti-alice", now.Add(2*time.Minute))
	assert.ErrorIs(t, err, session.ErrAlreadyRedeemed, "after a restart")
	again, err = st.IssueAdmission(ctx, rec("jti-new", a, time.Minute))
	require.NoError(t, err)
	assert.Equal(t, "jti-alice", again.ID, "a redeemed admission is not issued again")
	assert.False(t, again.Redeemed.IsZero())

	// Unknown jtis.
	for _, jti := range []string{"never-issued", "", "a.b", string(make([]byte, 500))} {
		_, err := st.RedeemAdmission(ctx, jti, now)
		assert.ErrorIs(t, err, session.ErrAdmissionNotFound, "%q", jti)
	}

	// Expiry, with the leeway's boundary: redeemable strictly before
	// expires + AdmissionLeeway.
	b := join("bob")
	c := join("carol")
	_, err = st.IssueAdmission(ctx, rec("jti-bob", b, time.Minute))
	require.NoError(t, err)
	_, err = st.IssueAdmission(ctx, rec("jti-carol", c, time.Minute))
	require.NoError(t, err)
	edge := now.Add(time.Minute + session.AdmissionLeeway)
	_, err = st.RedeemAdmission(ctx, "jti-bob", edge)
	assert.ErrorIs(t, err, session.ErrAdmissionNotFound, "expired at the edge")
	_, err = st.RedeemAdmission(ctx, "jti-carol", edge.Add(-time.Nanosecond))
	assert.NoError(t, err, "still within the leeway")
	_, err = st.RedeemAdmission(ctx, "jti-carol", edge.Add(time.Hour))
	assert.ErrorIs(t, err, session.ErrAdmissionNotFound, "expired and redeemed: not found")

	// 100 concurrent redeems of one jti: exactly one succeeds.
	d := join("dave")
	_, err = st.IssueAdmission(ctx, rec("jti-dave", d, time.Hour))
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	results := map[session.Code]int{}
	start := make(chan struct{})
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := st.RedeemAdmission(ctx, "jti-dave", now.Add(time.Second))
			mu.Lock()
			results[session.CodeOf(err)]++
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	assert.Equal(t, map[session.Code]int{"": 1, session.CodeAlreadyRedeemed: 99}, results)

	// The prune: expired admissions of gone sessions go, in chunks; those
	// of live sessions stay (so a live session is never issued a second).
	var gone []session.Session
	for i := range 20 {
		s := join(fmt.Sprintf("gone-%d", i))
		_, err := st.IssueAdmission(ctx, rec(fmt.Sprintf("jti-gone-%d", i), s, time.Minute))
		require.NoError(t, err)
		_, err = h.store.Release(ctx, cfg, s.ID, now)
		require.NoError(t, err)
		gone = append(gone, s)
	}
	later := now.Add(time.Minute + session.AdmissionLeeway + time.Second)
	_, err = h.store.Update(ctx, cfg, later, 7)
	require.NoError(t, err)
	for i, s := range gone {
		fresh, err := st.IssueAdmission(ctx, rec(fmt.Sprintf("jti-fresh-%d", i), s, time.Minute))
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprintf("jti-fresh-%d", i), fresh.ID, "pruned: %s", s.ID)
	}
	kept, err := st.IssueAdmission(ctx, rec("jti-bob-2", b, time.Minute))
	require.NoError(t, err)
	assert.Equal(t, "jti-bob", kept.ID, "a live session's expired admission is kept")

	// A session that joins again after a purge is a new incarnation.
	_, err = h.store.Release(ctx, cfg, "bob", later)
	require.NoError(t, err)
	b2, err := h.store.Join(ctx, cfg, "bob", later)
	require.NoError(t, err)
	require.NotEqual(t, b.Position, b2.Position)
	n, err := st.IssueAdmission(ctx, session.Admission{ID: "jti-bob-3", Gate: gateName, Session: "bob", Position: b2.Position, IssuedAt: later, Expires: later.Add(time.Minute)})
	require.NoError(t, err)
	assert.Equal(t, "jti-bob-3", n.ID)
}

// testAdmissionKeyring checks the keyring's read-modify-write: nil at
// first, what update stored afterwards (also after a restart), nothing
// written when update says unchanged or fails, and concurrent updates
// serialised.
func testAdmissionKeyring(t *testing.T, open Opener) {
	h := newHarness(t, open)
	ctx := h.ctx
	st := admissionStore(t, h)
	var seen [][]byte
	got, err := st.AdmissionKeyring(ctx, func(old []byte) ([]byte, bool, error) {
		seen = append(seen, old)
		return []byte("ring-1"), true, nil
	})
	require.NoError(t, err)
	assert.Equal(t, []byte("ring-1"), got)
	require.Len(t, seen, 1)
	assert.Empty(t, seen[0], "no ring yet")

	got, err = st.AdmissionKeyring(ctx, func(old []byte) ([]byte, bool, error) {
		return []byte("ignored"), false, nil
	})
	require.NoError(t, err)
	assert.Equal(t, []byte("ring-1"), got, "unchanged: the stored ring")

	boom := errors.New("boom")
	_, err = st.AdmissionKeyring(ctx, func(old []byte) ([]byte, bool, error) { return []byte("x"), true, boom })
	assert.ErrorIs(t, err, boom)

	h.reopen()
	st = admissionStore(t, h)
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := st.AdmissionKeyring(context.Background(), func(old []byte) ([]byte, bool, error) {
				return append(old, '+'), true, nil
			})
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	got, err = st.AdmissionKeyring(ctx, func(old []byte) ([]byte, bool, error) { return old, false, nil })
	require.NoError(t, err)
	assert.Equal(t, "ring-1++++++++++", string(got), "every update saw the one before")
}
