-- 0003_checkpoint_store: checkpoints kept by the scheduler's content-
-- addressed store (docs/scheduler.md, "The checkpoint store"). A row with
-- state 'stored' names an object (sha256, size) that was complete,
-- verified and durable before the row was written; rows from before
-- (an agent-local path reported by the agent) are 'reported'.
ALTER TABLE checkpoints ADD COLUMN sha256 TEXT;
ALTER TABLE checkpoints ADD COLUMN size INTEGER;
ALTER TABLE checkpoints ADD COLUMN state TEXT NOT NULL DEFAULT 'reported';
CREATE INDEX checkpoints_sha256 ON checkpoints(sha256);
