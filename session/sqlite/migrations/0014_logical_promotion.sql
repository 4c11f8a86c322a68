-- 0014 (logical promotion, issue 14): the update promotes the waiters at the
-- front of the normal lane without writing their rows. It records in the
-- gate's row a pending promotion: every live waiting row (status 0, not
-- purged by the waiting mark) whose position is in
-- [promoted_from, promoted_to) is active since promoted_at (unix
-- nanoseconds), with the claim deadline promoted_claim, or
-- promoted_notify_claim for a row to be called back (NULL: none). Every
-- reader applies it to such a row until the cleaner writes the rows
-- (materializes them) and empties the range; no purge mark rises while a
-- promotion is pending (an operation that could raise one, or that reads
-- rows by status in SQL, materializes it first).
--
-- The range starts empty: nothing is pending after the upgrade.

ALTER TABLE gates ADD COLUMN promoted_from INTEGER NOT NULL DEFAULT 0;
ALTER TABLE gates ADD COLUMN promoted_to INTEGER NOT NULL DEFAULT 0;
ALTER TABLE gates ADD COLUMN promoted_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE gates ADD COLUMN promoted_claim INTEGER;
ALTER TABLE gates ADD COLUMN promoted_notify_claim INTEGER;
