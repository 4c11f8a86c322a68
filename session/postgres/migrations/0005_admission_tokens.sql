-- 0004: admission tokens (as session/sqlite's 0004). One row per admission
-- issued: a session incarnation (gate, session, position) gets at most one,
-- and its jti is redeemed at most once, across every instance (the UPDATE
-- that redeems takes the row lock and re-checks redeemed_at). Times are
-- unix nanoseconds. The update prunes rows past their expiry whose session
-- is gone, in bounded chunks. The keyring lives in anteroom_meta.

CREATE TABLE anteroom_admissions (
    jti         text   PRIMARY KEY,
    gate        text   NOT NULL,
    session     text   NOT NULL,
    position    bigint NOT NULL,
    issued_at   bigint NOT NULL,
    expires_at  bigint NOT NULL,
    redeemed_at bigint,
    UNIQUE (gate, session, position)
);
CREATE INDEX anteroom_admissions_expiry ON anteroom_admissions (gate, expires_at);
