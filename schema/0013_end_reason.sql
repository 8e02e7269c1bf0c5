-- 0013_end_reason: why an experiment ended (issue 28; docs/scheduler.md
-- "End states"). FAILED joins ACTIVE|PAUSED|COMPLETED|CANCELED in
-- experiments.state; end_reason is the sentence shown with an ended state
-- ("search finished", "canceled by user", "20 trials failed in a row; the
-- last: exit code 127"), NULL while the experiment runs and in rows from
-- before this migration.
ALTER TABLE experiments ADD COLUMN end_reason TEXT;
