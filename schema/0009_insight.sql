-- 0009_insight: log search and webhooks (issue 17; docs/protocol.md "Log
-- search" and "Webhooks").
--
-- logs_fts: a trigram full-text index over logs.line (external content:
-- the text stays in logs only; detail=none keeps just which rows hold a
-- trigram). It answers LIKE '%needle%' (ASCII case-insensitive) for
-- needles of 3 characters or more without reading every row; the exact
-- match (case, regex) is then checked on those rows only. Kept current by
-- triggers in the inserting transaction, so it is never behind the logs.
CREATE VIRTUAL TABLE logs_fts USING fts5(line, content='logs', content_rowid='seq',
                                         tokenize='trigram', detail='none');
INSERT INTO logs_fts(logs_fts) VALUES('rebuild');
CREATE TRIGGER logs_fts_ai AFTER INSERT ON logs BEGIN
    INSERT INTO logs_fts(rowid, line) VALUES (new.seq, new.line);
END;
CREATE TRIGGER logs_fts_ad AFTER DELETE ON logs BEGIN
    INSERT INTO logs_fts(logs_fts, rowid, line) VALUES ('delete', old.seq, old.line);
END;

-- Webhooks: global (experiment_id NULL) or per experiment. events is a
-- JSON array of filters: "*", "experiment.*", "trial.*",
-- "experiment.COMPLETED", "trial.FAILED", ... format 'json' or 'slack'.
CREATE TABLE webhooks (
    id            INTEGER PRIMARY KEY,
    url           TEXT    NOT NULL,
    secret        TEXT    NOT NULL,       -- HMAC-SHA256 key; never returned by GET
    format        TEXT    NOT NULL DEFAULT 'json',
    events        TEXT    NOT NULL,
    experiment_id INTEGER REFERENCES experiments(id) ON DELETE CASCADE,
    created_at    INTEGER NOT NULL
);

-- The durable outbox: one row per (hook, state-change event) to deliver,
-- written by the trigger below in the same transaction as the events row
-- of the state change, so a change that committed is delivered at least
-- once, across restarts. The delivery thread (scheduler/notify/webhook.c) sets
-- delivered_at on a 2xx, else attempts/next_at (exponential backoff).
CREATE TABLE webhook_outbox (
    id           INTEGER PRIMARY KEY,
    hook_id      INTEGER NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
    event_id     INTEGER NOT NULL,        -- events.id
    attempts     INTEGER NOT NULL DEFAULT 0,
    next_at      INTEGER NOT NULL,
    delivered_at INTEGER,
    last_status  INTEGER,                 -- HTTP status of the last attempt (0: no answer)
    last_error   TEXT
);
CREATE INDEX webhook_outbox_due ON webhook_outbox(next_at) WHERE delivered_at IS NULL;
CREATE INDEX webhook_outbox_hook ON webhook_outbox(hook_id, id);

CREATE TRIGGER events_webhooks AFTER INSERT ON events
WHEN NEW.experiment_id IS NOT NULL AND NEW.type IN
     ('QUEUED', 'ASSIGNED', 'RUNNING', 'COMPLETED', 'FAILED', 'STOPPED', 'CANCELED', 'PAUSED', 'ACTIVE')
BEGIN
    INSERT INTO webhook_outbox(hook_id, event_id, next_at)
    SELECT h.id, NEW.id, NEW.time FROM webhooks h
    WHERE (h.experiment_id IS NULL OR h.experiment_id = NEW.experiment_id)
      AND EXISTS (SELECT 1 FROM json_each(h.events) j WHERE j.value IN
          ('*',
           (CASE WHEN NEW.trial_id IS NULL THEN 'experiment' ELSE 'trial' END) || '.*',
           (CASE WHEN NEW.trial_id IS NULL THEN 'experiment' ELSE 'trial' END) || '.' || NEW.type));
END;
