-- 0004: "leave, we'll call you" and the webhook outbox.
--
-- notify is set by the waiter's backend (POST /api/notify): a waiting
-- session so marked is not purged for absence, and when promoted its claim
-- window is the gate's notify_claim_timeout.
--
-- webhook_outbox holds one row per webhook event and subscriber, written in
-- the same transaction as the change it reports; the delivery worker leases
-- due rows (lease, lease_until), posts them and marks them delivered
-- (state 1, kept a day for dedup) or dead (state 2, kept). id is the
-- idempotency key of the delivery.

ALTER TABLE sessions ADD COLUMN notify INTEGER NOT NULL DEFAULT 0;

CREATE TABLE webhook_outbox (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    target      TEXT    NOT NULL,
    event       TEXT    NOT NULL,
    gate        TEXT    NOT NULL,
    dedup       TEXT,
    payload     BLOB    NOT NULL,
    created_at  INTEGER NOT NULL,
    next_at     INTEGER NOT NULL,
    attempts    INTEGER NOT NULL DEFAULT 0,
    state       INTEGER NOT NULL DEFAULT 0 CHECK (state IN (0, 1, 2)),
    lease       TEXT,
    lease_until INTEGER,
    done_at     INTEGER,
    last_error  TEXT
);

CREATE UNIQUE INDEX webhook_outbox_dedup ON webhook_outbox (target, dedup) WHERE dedup IS NOT NULL;
CREATE INDEX webhook_outbox_due ON webhook_outbox (next_at) WHERE state = 0;
CREATE INDEX webhook_outbox_done ON webhook_outbox (done_at) WHERE state = 1;
