-- 0017_outbox_event: an experiment's purge (scheduler/store/purge.c)
-- deletes each of its events with the event's webhook_outbox rows, global
-- hooks' included, found by this index. Before it, a global hook's rows
-- for a deleted experiment's events stayed: never delivered (their event
-- was gone) and counted as pending forever. Those left by earlier purges
-- go here.
CREATE INDEX IF NOT EXISTS webhook_outbox_event ON webhook_outbox(event_id);
DELETE FROM webhook_outbox WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.id = webhook_outbox.event_id);
