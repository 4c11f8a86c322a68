-- 0004: priority codes (issue 13), as session/sqlite's 0004. A session's
-- lane: 0 normal, 1 priority (it joined with a valid code); it never
-- changes. The priority lane is promoted first, in position order, from its
-- own partial index.
--
-- anteroom_priority_codes keeps a gate's codes by id, the hex SHA-256 of
-- the code (the code itself is never stored). used counts the joins it put
-- in the priority lane, written in the join's transaction under the gate's
-- row lock. Times are unix nanoseconds.

ALTER TABLE anteroom_sessions ADD COLUMN lane smallint NOT NULL DEFAULT 0;

CREATE INDEX anteroom_sessions_priority ON anteroom_sessions (gate, position) WHERE status = 0 AND lane = 1;

CREATE TABLE anteroom_priority_codes (
    gate       text   NOT NULL,
    id         text   NOT NULL,
    hint       text   NOT NULL,
    label      text   NOT NULL,
    max_uses   bigint NOT NULL CHECK (max_uses > 0),
    used       bigint NOT NULL CHECK (used >= 0),
    expires_at bigint NOT NULL,
    created_at bigint NOT NULL,
    PRIMARY KEY (gate, id)
);
