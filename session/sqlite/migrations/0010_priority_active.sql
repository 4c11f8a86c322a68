-- 0010 (priority lane, active): the priority lane is promoted before the
-- normal lane, so an active session of that lane may hold a position above
-- the first waiting one of the normal lane. Loading the active set reads the
-- rows below the first waiting position through the table and these few
-- rows through this index, never the long line between them.
CREATE INDEX sessions_priority_active ON sessions (gate, position) WHERE status = 1 AND lane = 1;
