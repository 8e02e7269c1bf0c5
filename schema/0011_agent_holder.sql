-- 0011: the agent token an agent registered with (docs/protocol.md,
-- "Agent tokens"). holder is the token's holder name from the token file: the
-- agent's own name for a named agent token ("agent:NAME TOKEN"), "agent"
-- for the shared unnamed form ("agent:TOKEN"); NULL for agents registered
-- without a token file or before this migration. The scheduler lets only
-- that token (or, for a NULL or "agent" holder, the shared token) speak
-- for the agent: heartbeats, long-polls and checkpoint uploads.
ALTER TABLE agents ADD COLUMN holder TEXT;
