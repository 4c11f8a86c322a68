-- anteroom's shared store. Times are unix nanoseconds (bigint), exactly as
-- the Go side has them; status 0 is waiting, 1 active.
CREATE TABLE anteroom_gates (
    name          text   PRIMARY KEY,
    next_position bigint NOT NULL DEFAULT 1,
    active        bigint NOT NULL DEFAULT 0,
    waiting       bigint NOT NULL DEFAULT 0,
    -- seq numbers the commits that changed the gate: every instance applies
    -- them in this order and sees a gap when it missed one.
    seq           bigint NOT NULL DEFAULT 0
);

CREATE TABLE anteroom_sessions (
    gate        text     NOT NULL,
    position    bigint   NOT NULL,
    id          text     NOT NULL,
    status      smallint NOT NULL,
    last_active bigint,
    created_at  bigint   NOT NULL,
    PRIMARY KEY (gate, position),
    UNIQUE (gate, id)
);
CREATE INDEX anteroom_sessions_waiting ON anteroom_sessions (gate, position) WHERE status = 0;
CREATE INDEX anteroom_sessions_left ON anteroom_sessions (gate, last_active) WHERE status = 0 AND last_active IS NOT NULL;
CREATE INDEX anteroom_sessions_active ON anteroom_sessions (gate, last_active) WHERE status = 1;

-- The outbox: what each commit did to a gate, read by the other instances
-- when NOTIFY tells them of it. Pruned by the update.
CREATE TABLE anteroom_commits (
    gate        text        NOT NULL,
    seq         bigint      NOT NULL,
    committed   timestamptz NOT NULL DEFAULT now(),
    payload     jsonb       NOT NULL,
    PRIMARY KEY (gate, seq)
);

CREATE TABLE anteroom_meta (
    key   text  PRIMARY KEY,
    value bytea NOT NULL
);
