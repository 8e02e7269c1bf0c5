-- 0005: checkpoint retention and archived experiments (docs/scheduler.md,
-- "Checkpoint retention"). An archived experiment keeps its summary and
-- trials, is hidden from the default list and has no checkpoints left.
ALTER TABLE experiments ADD COLUMN archived INTEGER NOT NULL DEFAULT 0;
