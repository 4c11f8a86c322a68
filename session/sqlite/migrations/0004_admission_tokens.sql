-- 0004: admission tokens (gate/token's admission JWTs). One row per
-- admission issued: a session incarnation (gate, session, position) gets at
-- most one, and its jti is redeemed at most once. Times are unix
-- nanoseconds; redeemed_at is NULL until the jti is redeemed. The update
-- prunes rows past their expiry whose session is gone, in bounded chunks.
-- The keyring (Ed25519 keys) lives in meta beside the token secret.

CREATE TABLE admissions (
    jti         TEXT    NOT NULL PRIMARY KEY,
    gate        TEXT    NOT NULL,
    session     TEXT    NOT NULL,
    position    INTEGER NOT NULL,
    issued_at   INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    redeemed_at INTEGER
) WITHOUT ROWID;

CREATE UNIQUE INDEX admissions_session ON admissions (gate, session, position);
CREATE INDEX admissions_expiry ON admissions (gate, expires_at);
