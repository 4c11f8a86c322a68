package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anteroomhq/anteroom/session"
	"github.com/anteroomhq/anteroom/session/postgres/pgtest"
	"github.com/anteroomhq/anteroom/session/sessiontest"
)

// Two instances on one database: an admission issued on one is the one the
// other returns for the same session, 100 redeems spread over both succeed
// exactly once, and both read the same keyring.
func TestAdmissionsAcrossInstances(t *testing.T) {
	url := pgtest.DB(t)
	a, b := open(t, url, quiet), open(t, url, quiet)
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	ctx := context.Background()
	now := sessiontest.Epoch
	cfg := sessiontest.GateConfig("default", 10)
	_, err := a.Load(ctx, []string{"default"})
	require.NoError(t, err)
	s, err := a.Join(ctx, cfg, "alice", now)
	require.NoError(t, err)

	rec := session.Admission{ID: "jti-a", Gate: "default", Session: "alice", Position: s.Position, IssuedAt: now, Expires: now.Add(time.Minute)}
	got, err := a.IssueAdmission(ctx, rec)
	require.NoError(t, err)
	rec.ID = "jti-b"
	other, err := b.IssueAdmission(ctx, rec)
	require.NoError(t, err)
	assert.Equal(t, got.ID, other.ID, "the instance that asked second gets the first's admission")

	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[session.Code]int{}
	for i := range 100 {
		st := a
		if i%2 == 1 {
			st = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := st.RedeemAdmission(ctx, "jti-a", now)
			mu.Lock()
			codes[session.CodeOf(err)]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	assert.Equal(t, map[session.Code]int{"": 1, session.CodeAlreadyRedeemed: 99}, codes)

	ring, err := a.AdmissionKeyring(ctx, func([]byte) ([]byte, bool, error) { return []byte("ring"), true, nil })
	require.NoError(t, err)
	seen, err := b.AdmissionKeyring(ctx, func(old []byte) ([]byte, bool, error) { return old, false, nil })
	require.NoError(t, err)
	assert.Equal(t, ring, seen)
}
