-- 0008_workflow: the experiment workflow of issue #17 (docs/scheduler.md,
-- "Workflow: notes, tags, fork, warm start, users").
--   experiments.description, tags   editable (PATCH); NULL = take them from
--                                   the stored config (rows from before)
--   experiments.parent_experiment   the experiment this one was forked from
--   experiments.submitted_by        the user name of the submitting token
--   experiments.warm_history        JSON snapshot of the earlier trials a
--                                   warm start observes, taken at submission
--                                   so that a restart replays the same model
--   trials.notes                    Markdown, editable (PATCH)
--   events.user_name                who asked for it (NULL: the scheduler)
ALTER TABLE experiments ADD COLUMN description TEXT;
ALTER TABLE experiments ADD COLUMN tags TEXT;
ALTER TABLE experiments ADD COLUMN parent_experiment INTEGER;
ALTER TABLE experiments ADD COLUMN submitted_by TEXT;
ALTER TABLE experiments ADD COLUMN warm_history TEXT;
ALTER TABLE trials ADD COLUMN notes TEXT;
ALTER TABLE events ADD COLUMN user_name TEXT;
CREATE INDEX events_exp ON events(experiment_id, id);
