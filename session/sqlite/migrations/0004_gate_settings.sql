-- 0004: runtime gate settings. A gate's settings changed through the admin
-- API (limit, timeouts, mode, pacing) are kept here as one JSON object per
-- gate (session/sqlite/settings.go) and win over the config file's at start
-- until they are reset (the row deleted). A gate added at runtime has a row
-- too, which is how it comes back after a restart.

CREATE TABLE gate_settings (
    gate     TEXT NOT NULL PRIMARY KEY,
    settings TEXT NOT NULL
) WITHOUT ROWID;
