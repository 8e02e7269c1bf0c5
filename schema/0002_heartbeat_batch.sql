-- 0002_heartbeat_batch: duplicate-safe heartbeats. The agent sends a random
-- per-process "instance" and a per-instance "batch" number; the scheduler
-- keeps the last batch it committed for that instance, in the same
-- transaction as the batch's items, and acknowledges a repeated batch
-- without storing its items again.
ALTER TABLE agents ADD COLUMN hb_instance TEXT;
ALTER TABLE agents ADD COLUMN hb_batch INTEGER NOT NULL DEFAULT 0;
