-- 0012 (logical purge of idle active sessions, issue 14): the update purges
-- the active sessions idle past active_timeout as 0011 purges the waiters
-- gone past waiting_timeout, by raising a second mark instead of deleting
-- their rows, and the cleaner deletes the rows afterwards.
--
-- An active row not to be called back (notify = 0) with a last sign of
-- life, whose (last_active, position) is below the gate's active purge mark
-- (active_purged_seen, active_purged_position), is purged: every statement
-- that reads active rows leaves it out, and no write gives a live active
-- session a (last_active, position) below the mark. The stale active
-- sessions are read from sessions_seen (0011), which holds them together
-- by their last sign of life: an update no longer writes a page per idle
-- session.
--
-- The mark starts below every row: nothing is purged by the upgrade.

ALTER TABLE gates ADD COLUMN active_purged_seen INTEGER NOT NULL DEFAULT -9223372036854775808;
ALTER TABLE gates ADD COLUMN active_purged_position INTEGER NOT NULL DEFAULT -9223372036854775808;
