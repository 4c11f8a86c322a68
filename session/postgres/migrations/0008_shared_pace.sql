-- 0004: the pacing of admissions (newUsersPerMinute) is shared by every
-- instance: the token bucket (session.Pace) lives in the gate's row, read
-- and written under the gate's row lock by the transaction that admits.
-- pace_at is unix nanoseconds, 0 for a full bucket never used.
ALTER TABLE anteroom_gates
    ADD COLUMN pace_tokens double precision NOT NULL DEFAULT 0,
    ADD COLUMN pace_at     bigint           NOT NULL DEFAULT 0;
