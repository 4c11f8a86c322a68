-- 0001: gates with their persisted counters, the sessions, and a key/value
-- table for the few things the sidecar keeps beside them (the token secret).

CREATE TABLE gates (
    name          TEXT    NOT NULL PRIMARY KEY,
    next_position INTEGER NOT NULL,
    active        INTEGER NOT NULL,
    waiting       INTEGER NOT NULL
) WITHOUT ROWID;

-- Clustered on (gate, id): the hot path (join, leave, release, touch) looks a
-- session up by its key, which is one b-tree seek without a rowid indirection.
-- status: 0 waiting, 1 active. last_active, created_at: unix nanoseconds;
-- last_active is NULL for a waiting session that has not left.
CREATE TABLE sessions (
    gate        TEXT    NOT NULL,
    id          TEXT    NOT NULL,
    position    INTEGER NOT NULL,
    status      INTEGER NOT NULL CHECK (status IN (0, 1)),
    last_active INTEGER,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (gate, id)
) WITHOUT ROWID;

-- The waiting line in position order: promotions, first/last waiting. Partial,
-- so active rows cost it nothing.
CREATE INDEX sessions_waiting ON sessions (gate, position) WHERE status = 0;

-- Purges (stale waiting, stale active) and the active set at load. Partial:
-- a waiter that has not left (the bulk of a long line) is not in it, so a
-- waiting join writes two b-trees, not three.
CREATE INDEX sessions_last_active ON sessions (gate, status, last_active) WHERE last_active IS NOT NULL;

CREATE TABLE meta (
    key   TEXT NOT NULL PRIMARY KEY,
    value BLOB NOT NULL
) WITHOUT ROWID;
