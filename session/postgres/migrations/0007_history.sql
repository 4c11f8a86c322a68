-- 0004: history, the lifecycle of every session (session.HistoryRecord),
-- written by the writer in the transaction of the commit that caused it
-- (queued in the same round trip as the outbox row) and pruned by the
-- update past history_retention. at, wait: unix nanoseconds; status 0
-- waiting, 1 active; reason: session.PurgeReason; wait is set on admissions
-- only.
CREATE TABLE anteroom_history (
    id       bigint   GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at       bigint   NOT NULL,
    gate     text     NOT NULL,
    session  text     NOT NULL,
    kind     text     NOT NULL,
    status   smallint NOT NULL,
    position bigint   NOT NULL,
    reason   smallint NOT NULL,
    wait     bigint
);

-- Reads go by gate, newest first by id, and by session.
CREATE INDEX anteroom_history_gate ON anteroom_history (gate, id);
CREATE INDEX anteroom_history_session ON anteroom_history (gate, session, id);
