-- 0004 (expiry index): the update finds stale sessions through indexes on
-- when they expire instead of sweeping the gate's rows, so its cost follows
-- what is stale, not the length of the line (issue 14).
--
-- sessions_last_active (0002) already orders every session with a last
-- sign of life by (gate, status, last_active): the purge selects from it
-- with a range, no coalesce() around the column (which kept SQLite from
-- using it). Two partial indexes cover the rest of session.StaleReason:
--
-- - sessions_claim: promoted sessions still unclaimed, by deadline. Only
--   the few sessions inside their claim window are in it.
-- - sessions_unseen: rows without last_active (written before 0003, last
--   seen at their creation). Empty on every file written since.

CREATE INDEX sessions_claim ON sessions (gate, claim_deadline) WHERE claim_deadline IS NOT NULL;

CREATE INDEX sessions_unseen ON sessions (gate, status, created_at) WHERE last_active IS NULL;
