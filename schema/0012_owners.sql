-- 0012_owners: who owns a webhook (issue 27; docs/api.md "Roles").
-- An experiment's owner is experiments.submitted_by (0008); a webhook's is
-- the user who created it. Webhooks created before this migration have no
-- recorded creator (NULL): only admins may see their URL or delete them.
ALTER TABLE webhooks ADD COLUMN created_by TEXT;
