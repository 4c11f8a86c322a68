-- 0004: "leave, we'll call you" and the webhook outbox (as session/sqlite's
-- 0004).
--
-- notify is set by the waiter's backend (POST /api/notify): a waiting
-- session so marked is not purged for absence, and when promoted its claim
-- window is the gate's notify_claim_timeout.
--
-- anteroom_webhook_outbox holds one row per webhook event and subscriber,
-- written in the same transaction as the change it reports. A delivery
-- worker of any instance leases due rows (SELECT ... FOR UPDATE SKIP LOCKED,
-- then lease/lease_until), posts them and marks them delivered (state 1,
-- kept a day for dedup) or dead (state 2, kept). id is the idempotency key.

ALTER TABLE anteroom_sessions ADD COLUMN notify boolean NOT NULL DEFAULT false;

CREATE TABLE anteroom_webhook_outbox (
    id          bigserial PRIMARY KEY,
    target      text      NOT NULL,
    event       text      NOT NULL,
    gate        text      NOT NULL,
    dedup       text,
    payload     bytea     NOT NULL,
    created_at  bigint    NOT NULL,
    next_at     bigint    NOT NULL,
    attempts    integer   NOT NULL DEFAULT 0,
    state       smallint  NOT NULL DEFAULT 0 CHECK (state IN (0, 1, 2)),
    lease       text,
    lease_until bigint,
    done_at     bigint,
    last_error  text
);

CREATE UNIQUE INDEX anteroom_webhook_outbox_dedup ON anteroom_webhook_outbox (target, dedup) WHERE dedup IS NOT NULL;
CREATE INDEX anteroom_webhook_outbox_due ON anteroom_webhook_outbox (next_at) WHERE state = 0;
CREATE INDEX anteroom_webhook_outbox_done ON anteroom_webhook_outbox (done_at) WHERE state = 1;
