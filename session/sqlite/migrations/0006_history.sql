-- 0004: history, the lifecycle of every session (session.HistoryRecord),
-- written by the writer in the transaction of the commit that caused it and
-- pruned by the update past history_retention.
--
-- One row per transaction and gate: the records that transaction wrote for
-- that gate, numbered first .. first+n-1 (from the meta row history_seq),
-- packed in data (session/sqlite/history.go), with the span of their times.
-- A batch of hundreds of joins adds one row, appended at the end of its
-- gate's range, not a b-tree insert per join. Reads go newest first by
-- number (commit order) and decode the rows whose span meets the time range
-- asked; a filter by session is applied to the decoded records (no index on
-- random session ids, which would cost a page per join). Pruning deletes a
-- gate's oldest rows once all their records are older than the retention.
-- min_at, max_at: unix nanoseconds.
CREATE TABLE history (
    gate   TEXT    NOT NULL,
    first  INTEGER NOT NULL,
    n      INTEGER NOT NULL,
    min_at INTEGER NOT NULL,
    max_at INTEGER NOT NULL,
    data   BLOB    NOT NULL,
    PRIMARY KEY (gate, first)
) WITHOUT ROWID;
