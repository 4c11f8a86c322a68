-- 0004: scheduled events (launches with a pre-queue and an auditable
-- lottery), one row per event of a gate, the JSON session keeps of it
-- (session.EncodeStoredEvent): its schedule, its secret seed (published only
-- once the event started) and its lottery state. Every change runs under
-- the gate row's lock, so each transition happens once.

CREATE TABLE anteroom_events (
    gate  text  NOT NULL,
    id    text  NOT NULL,
    event jsonb NOT NULL,
    PRIMARY KEY (gate, id)
);
