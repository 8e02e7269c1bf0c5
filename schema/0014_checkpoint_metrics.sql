-- 0014_checkpoint_metrics: the metrics reported at a checkpoint's step
-- (issue 28; docs/scheduler.md "Checkpoint retention"). JSON object
-- {"name": value} of each metric's last report at that step; written by
-- the retention pass once the trial has ended (every report is in by
-- then), NULL before: the checkpoint list computes it from metrics then.
ALTER TABLE checkpoints ADD COLUMN metrics TEXT;
