-- 0004_checkpoint_travel: checkpoints travel with their trial
-- (docs/scheduler.md, "The checkpoint store"; docs/agent.md, "Checkpoints
-- travel"). name: the file name the trial wrote (its basename), under
-- which an agent restores it into the trial's checkpoint directory;
-- agent_id: the agent that uploaded it (it holds the object in its cache,
-- so placement prefers it for a resume).
ALTER TABLE checkpoints ADD COLUMN name TEXT;
ALTER TABLE checkpoints ADD COLUMN agent_id INTEGER;
