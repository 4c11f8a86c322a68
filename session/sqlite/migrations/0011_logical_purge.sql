-- 0011 (logical purge, issue 14): the update purges stale waiters without
-- touching their rows, and a cleaner deletes the rows afterwards.
--
-- Deleting a stale waiter writes the page its row sits on, and stale
-- waiters sit scattered over the line (they left at random places): on a
-- long line that was most of an update's cost (about 55 µs a row at 1M
-- sessions), whatever the rest of the update did. Now the update reads the
-- stale waiters from an index, which holds them together (by their last
-- sign of life), and in the same transaction counts them out, reports them
-- (history, webhooks, the Waitlist's memory) and raises the gate's purge
-- mark, (purged_seen, purged_position): a waiting row that is not to be
-- called back (notify = 0) and whose (last_active, position) is below the
-- mark is purged. Every statement that reads waiting rows leaves such rows
-- out, and no write ever gives a live waiter a (last_active, position)
-- below the mark, so the mark and the counters say the same thing. The
-- rows are deleted later by the cleaner, in small transactions; and at
-- open, before anything reads them, for a process that stopped first.
--
-- The mark starts below every row: nothing is purged by the upgrade.

ALTER TABLE gates ADD COLUMN purged_seen INTEGER NOT NULL DEFAULT -9223372036854775808;
ALTER TABLE gates ADD COLUMN purged_position INTEGER NOT NULL DEFAULT -9223372036854775808;

-- sessions_last_active (0002), widened: it holds what a purged waiter's
-- events need (its position, id, lane and times), so the update never
-- reads the table for them, and notify before the last sign of life, so
-- that the waiters to purge (notify = 0) are one range in (last_active,
-- position) order, the mark's order. Partial, as before: a row without
-- last_active (written before 0003) is not in it (sessions_unseen, 0009).
DROP INDEX sessions_last_active;
CREATE INDEX sessions_seen ON sessions (gate, status, notify, last_active, position, lane, id, created_at) WHERE last_active IS NOT NULL;
