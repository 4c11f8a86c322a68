-- 0004: priority codes (issue 13). A session's lane: 0 normal, 1 priority
-- (it joined with a valid code); it never changes. The priority lane is
-- promoted first, in position order, from its own partial index: small
-- (only waiters of the priority lane), and empty costs a promotion one seek.
--
-- priority_codes keeps a gate's codes by id, the hex SHA-256 of the code:
-- the code itself is never stored. used counts the joins it put in the
-- priority lane, written in the same transaction as the join. Times are unix
-- nanoseconds.

ALTER TABLE sessions ADD COLUMN lane INTEGER NOT NULL DEFAULT 0;

CREATE INDEX sessions_priority ON sessions (gate, position) WHERE status = 0 AND lane = 1;

CREATE TABLE priority_codes (
    gate       TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    hint       TEXT    NOT NULL,
    label      TEXT    NOT NULL,
    max_uses   INTEGER NOT NULL CHECK (max_uses > 0),
    used       INTEGER NOT NULL CHECK (used >= 0),
    expires_at INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (gate, id)
) WITHOUT ROWID;
