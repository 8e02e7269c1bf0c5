-- 0006_code_contexts: experiment code contexts (docs/scheduler.md, "Code
-- contexts"). A context is a gzip'd tar of the user's code, stored as an
-- object of the content-addressed store like a checkpoint. One row per
-- upload (experiment_id NULL) and one per experiment that names it in its
-- "context" field (written by the trigger below in the experiment's own
-- insert, so the two can never disagree). An object named by any row
-- whose experiment still exists is in use: retention must not delete it.
CREATE TABLE contexts (
    id            INTEGER PRIMARY KEY,
    sha256        TEXT    NOT NULL,
    size          INTEGER NOT NULL,
    experiment_id INTEGER REFERENCES experiments(id) ON DELETE CASCADE,
    time          INTEGER NOT NULL
);
CREATE INDEX contexts_sha256 ON contexts(sha256);
CREATE INDEX contexts_experiment ON contexts(experiment_id);

CREATE TRIGGER experiments_context AFTER INSERT ON experiments
WHEN json_valid(NEW.config) AND json_type(NEW.config, '$.context') = 'text'
BEGIN
    INSERT INTO contexts(sha256, size, experiment_id, time)
    VALUES (json_extract(NEW.config, '$.context'),
            COALESCE((SELECT size FROM contexts WHERE sha256 = json_extract(NEW.config, '$.context')
                      ORDER BY id LIMIT 1), -1),
            NEW.id, NEW.created_at);
END;
