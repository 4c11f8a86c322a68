-- 0004: history, the lifecycle of every session (session.HistoryRecord),
-- written by the writer in the transaction of the commit that caused it and
-- pruned by the update past history_retention.
--
-- A rowid table: records are appended in commit order, so both b-trees grow
-- at their end (the index's key starts with the gate, then the time, which
-- only grows but for clock steps) and a transaction of hundreds of joins
-- writes a handful of pages. Reads go by gate and time, newest first; the
-- rowid breaks ties and is the cursor's second half. A filter by session
-- reads the gate's records in the time range asked (no index on random
-- session ids, which would cost a page per join).
-- at, wait: unix nanoseconds. status: 0 waiting, 1 active. reason:
-- session.PurgeReason. wait is set on admissions only.
CREATE TABLE history (
    id       INTEGER PRIMARY KEY,
    at       INTEGER NOT NULL,
    gate     TEXT    NOT NULL,
    session  TEXT    NOT NULL,
    kind     TEXT    NOT NULL,
    status   INTEGER NOT NULL,
    position INTEGER NOT NULL,
    reason   INTEGER NOT NULL,
    wait     INTEGER
);

CREATE INDEX history_gate_at ON history (gate, at);
