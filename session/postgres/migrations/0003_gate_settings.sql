-- 0003: runtime gate settings (the admin API's changes), one row per gate,
-- the JSON of session/postgres's storedSettings. Nothing is written until an
-- operator changes a gate; a row is deleted when its settings are reset or
-- the gate removed. Settings here win over the config file's at start.

CREATE TABLE anteroom_gate_settings (
    gate     text  PRIMARY KEY,
    settings jsonb NOT NULL
);
