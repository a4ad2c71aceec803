-- tickwork shard schema, version 5: what the Kubernetes operator needs.
--
-- definitions.managed_by: where a definition is declared when not through the HTTP API
-- (a ScheduledJob object, or a manifest file of tickwork dev). The API refuses to change
-- or delete such a definition, and the operator's resync at start removes the ones whose
-- object is gone, and only those. A partial index keeps that scan to managed jobs.
-- Nullable without a default: an instant change on a large table.

ALTER TABLE definitions
    ADD COLUMN managed_by text CHECK (managed_by IN ('kubernetes', 'manifests'));
CREATE INDEX definitions_managed ON definitions (managed_by, tenant, name)
    WHERE managed_by IS NOT NULL;
