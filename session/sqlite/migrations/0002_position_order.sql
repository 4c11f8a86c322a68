-- 0002: sessions keyed in position order. 0001 clustered the rows on
-- (gate, id): ids are random, so every insert went to a random page, and a
-- transaction wrote to the WAL about as many pages as it inserted rows.
-- Keyed on (gate, position), a join appends at the end of its gate's range,
-- and a transaction of hundreds of joins writes a handful of pages.
--
-- A session is found by its id through an index the Store keeps in memory
-- (session/sqlite/index.go) and rebuilds from this table at open: an SQL
-- index on (gate, id) would be as random as the old table was. The Store
-- alone keeps (gate, id) unique: it owns the file (the process lock).
--
-- The table is also the waiting line: every active session's position is
-- below every waiting one (a new session is active only when nobody waits,
-- and waiters are promoted in position order), so the first waiters are the
-- first rows with status 0 from a bound the Store keeps, and 0001's partial
-- index sessions_waiting is gone: purging scattered waiters no longer
-- writes a scattered index page for each.
--
-- The rows are copied as they are: positions, counters and next_position
-- are kept.

CREATE TABLE sessions_new (
    gate        TEXT    NOT NULL,
    position    INTEGER NOT NULL,
    id          TEXT    NOT NULL,
    status      INTEGER NOT NULL CHECK (status IN (0, 1)),
    last_active INTEGER,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (gate, position)
) WITHOUT ROWID;

INSERT INTO sessions_new (gate, position, id, status, last_active, created_at)
    SELECT gate, position, id, status, last_active, created_at FROM sessions ORDER BY gate, position;

DROP TABLE sessions;
ALTER TABLE sessions_new RENAME TO sessions;

-- As in 0001: purges (stale waiting, stale active) and the active set at
-- load. Partial: a waiter that has not left (the bulk of a long line) is not
-- in it.
CREATE INDEX sessions_last_active ON sessions (gate, status, last_active) WHERE last_active IS NOT NULL;
