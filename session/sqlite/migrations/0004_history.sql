-- 0004: history, the lifecycle of every session (session.HistoryRecord),
-- written by the writer in the transaction of the commit that caused it and
-- pruned by the update past history_retention.
--
-- One b-tree, clustered on (gate, at, id): records are appended at the end
-- of their gate's range (the time only grows, but for clock steps), so a
-- transaction of hundreds of joins writes a handful of pages and no second
-- index. Reads go by gate and time, newest first; id breaks ties (the
-- writer numbers records from the meta row history_seq) and is the
-- cursor's second half; pruning walks each gate's oldest records. A filter
-- by session reads the gate's records in the time range asked (no index on
-- random session ids, which would cost a page per join).
-- at, wait: unix nanoseconds. kind: the index of the kind in
-- session.HistoryKinds (only ever appended to). status: 0 waiting, 1
-- active. reason: session.PurgeReason. wait is set on admissions only.
CREATE TABLE history (
    gate     TEXT    NOT NULL,
    at       INTEGER NOT NULL,
    id       INTEGER NOT NULL,
    session  TEXT    NOT NULL,
    kind     INTEGER NOT NULL,
    status   INTEGER NOT NULL,
    position INTEGER NOT NULL,
    reason   INTEGER NOT NULL,
    wait     INTEGER,
    PRIMARY KEY (gate, at, id)
) WITHOUT ROWID;
