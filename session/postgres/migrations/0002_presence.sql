-- 0002: presence (as session/sqlite's 0003). A waiter's last_active is now
-- its last sign of life (its join, a request or an open socket naming it),
-- no longer a departure mark that is null while it stays: a waiter with no
-- sign of life for waiting_timeout is purged, beacon or not. Waiters written
-- before this version (null: they had not left) get the time of the
-- upgrade, so that none is purged by the upgrade itself; those still there
-- show a sign of life again within the timeout.
--
-- claim_deadline is set on a session promoted from the line until it shows
-- its first sign of life (it claims its slot); past it, the session is
-- purged and the slot passed on.

ALTER TABLE anteroom_sessions ADD COLUMN claim_deadline bigint;

UPDATE anteroom_sessions
   SET last_active = (extract(epoch FROM clock_timestamp()) * 1000000)::bigint * 1000
 WHERE status = 0 AND last_active IS NULL;

-- The purges select on the last sign of life (a row without last_active is
-- last seen at its creation) and, for active sessions, on the claim
-- deadline.
DROP INDEX anteroom_sessions_left;
DROP INDEX anteroom_sessions_active;
CREATE INDEX anteroom_sessions_seen_waiting ON anteroom_sessions (gate, (coalesce(last_active, created_at))) WHERE status = 0;
CREATE INDEX anteroom_sessions_seen_active ON anteroom_sessions (gate, (coalesce(last_active, created_at))) WHERE status = 1;
CREATE INDEX anteroom_sessions_unclaimed ON anteroom_sessions (gate, claim_deadline) WHERE claim_deadline IS NOT NULL;
