-- 0004: the pacing of admissions (newUsersPerMinute) is kept in the gate's
-- row with its counters, so that a restart does not hand out a fresh burst.
-- pace_at is unix nanoseconds, 0 for a full bucket never used.
ALTER TABLE gates ADD COLUMN pace_tokens REAL NOT NULL DEFAULT 0;
ALTER TABLE gates ADD COLUMN pace_at INTEGER NOT NULL DEFAULT 0;
