-- 0013 (the line's front together in sessions_seen, issue 14): the index
-- of last signs of life orders the rows by the second of their
-- last sign of life, then by position, instead of by the exact time.
--
-- A promotion moves a waiter's entry out of the waiting part of
-- sessions_seen. Ordered by the exact time, the waiters at the front of
-- the line sit anywhere in it (a present waiter's stored sign of life is
-- spread over a quarter of waiting_timeout, in no relation to its place),
-- so each promotion wrote a page of its own: about 4,500 pages (18 MB of
-- WAL) for 5,000 promotions at a million sessions. Ordered by the second
-- first, the waiters of the front sit together within each second (one
-- run of them a second of the spread).
--
-- The purge marks (0011, 0012) follow the index's order: a row is
-- covered by a mark (seen, pos) when (last_active / 1000000000, position)
-- is below (seen / 1000000000, pos). The update raises a mark over the
-- rows of whole seconds before the cutoff's, and deletes the few stale
-- rows of the cutoff's own second (session.StaleCutoffs stays exact).
--
-- The marks as stored meant the exact order. Open deletes the rows they
-- cover first, in that order, after checking them against the counters as
-- at any start (Store.migrate: a damaged mark refuses the file, nothing
-- deleted); here they go back below every row.

UPDATE gates SET purged_seen = -9223372036854775808, purged_position = -9223372036854775808,
    active_purged_seen = -9223372036854775808, active_purged_position = -9223372036854775808;

DROP INDEX sessions_seen;
CREATE INDEX sessions_seen ON sessions (gate, status, notify, last_active / 1000000000, position, last_active, lane, id, created_at) WHERE last_active IS NOT NULL;
