-- 0016_purge_queue: deleted experiments whose rows are still being removed
-- (docs/scheduler.md "Deleting an experiment"). DELETE
-- /api/v1/experiments/{id} writes this row in the small transaction that
-- makes the experiment disappear; the core's tick then deletes the
-- experiment's webhooks, metrics, logs, events, trials and the rest in
-- bounded transactions (scheduler/store/purge.c), and this row with the
-- experiments row in the last one. An experiment named here is never
-- loaded, so a restart shows nothing of it and resumes the purge.
CREATE TABLE purge_queue (
    experiment_id INTEGER PRIMARY KEY REFERENCES experiments(id),
    queued_at     INTEGER NOT NULL
);
