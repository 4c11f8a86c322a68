-- 0003: presence. A waiter's last_active is now its last sign of life (its
-- join, a request or an open socket naming it), no longer a departure mark
-- that is null while it stays: a waiter with no sign of life for
-- waiting_timeout is purged, beacon or not. Waiters written before this
-- version (null: they had not left) get the time of the upgrade, so that
-- none is purged by the upgrade itself; those still there show a sign of
-- life again within the timeout.
--
-- claim_deadline is set on a session promoted from the line until it shows
-- its first sign of life (it claims its slot); past it, the session is
-- purged and the slot passed on.

ALTER TABLE sessions ADD COLUMN claim_deadline INTEGER;

UPDATE sessions
   SET last_active = CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) * 1000000
 WHERE status = 0 AND last_active IS NULL;
