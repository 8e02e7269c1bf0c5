-- 0018_webhook_counts: delivered webhook_outbox rows are not kept.
-- Before it every delivered row stayed forever (one per hook and state
-- change), so the outbox grew with every trial and listing the hooks
-- counted them all. Now the transaction that records a delivery
-- (scheduler/notify/webhook_outbox.c) deletes the row and counts it on its
-- hook, which also keeps the last attempt's HTTP status and time.
--
-- A delivery's id (X-Hyperfarm-Delivery, which receivers deduplicate on)
-- is its row id, so ids must never come back once rows are deleted:
-- the table is rebuilt with AUTOINCREMENT, its sequence starting above
-- every id handed out before. (Without it, SQLite gives a new row the
-- largest id + 1, so deleting the newest rows, as a purge could already,
-- reused a delivered id.) The rows delivered so far are counted here.
ALTER TABLE webhooks ADD COLUMN delivered INTEGER NOT NULL DEFAULT 0;
ALTER TABLE webhooks ADD COLUMN last_status INTEGER;   -- the last attempt's HTTP status (0: no answer)
ALTER TABLE webhooks ADD COLUMN last_attempt_at INTEGER;
UPDATE webhooks SET
    delivered = (SELECT count(*) FROM webhook_outbox o WHERE o.hook_id = webhooks.id AND o.delivered_at IS NOT NULL),
    last_status = (SELECT o.last_status FROM webhook_outbox o WHERE o.hook_id = webhooks.id AND o.attempts > 0
                   ORDER BY coalesce(o.delivered_at, o.next_at) DESC LIMIT 1),
    last_attempt_at = (SELECT max(coalesce(o.delivered_at, o.next_at)) FROM webhook_outbox o
                       WHERE o.hook_id = webhooks.id AND o.attempts > 0);

DROP TRIGGER IF EXISTS events_webhooks;   -- IF EXISTS: a test rewinds user_version past 0019
CREATE TABLE webhook_outbox_new (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    hook_id      INTEGER NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
    event_id     INTEGER NOT NULL,        -- events.id
    attempts     INTEGER NOT NULL DEFAULT 0,
    next_at      INTEGER NOT NULL,
    delivered_at INTEGER,                 -- unused since 0018 (delivered rows are deleted)
    last_status  INTEGER,                 -- HTTP status of the last attempt (0: no answer)
    last_error   TEXT
);
INSERT INTO webhook_outbox_new SELECT * FROM webhook_outbox WHERE delivered_at IS NULL;
INSERT INTO sqlite_sequence(name, seq) SELECT 'webhook_outbox_new', coalesce(max(id), 0) FROM webhook_outbox
    WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'webhook_outbox_new');
UPDATE sqlite_sequence SET seq = max(seq, (SELECT coalesce(max(id), 0) FROM webhook_outbox))
    WHERE name = 'webhook_outbox_new';
DROP TABLE webhook_outbox;
ALTER TABLE webhook_outbox_new RENAME TO webhook_outbox;
CREATE INDEX webhook_outbox_due ON webhook_outbox(next_at) WHERE delivered_at IS NULL;
CREATE INDEX webhook_outbox_hook ON webhook_outbox(hook_id, id);
CREATE INDEX webhook_outbox_event ON webhook_outbox(event_id);

-- as in 0009_insight.sql
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
