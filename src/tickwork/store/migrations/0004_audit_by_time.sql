-- tickwork shard schema, version 4: the audit log is read newest first, by tenant and
-- optionally by job (GET /v1/audit), in the (at, id) order its cursor follows across
-- shards. These indexes serve both keyset queries; the per-job one replaces the index
-- by id, which no query reads any more.

CREATE INDEX audit_log_tenant_at ON audit_log (tenant, at DESC, id DESC);
CREATE INDEX audit_log_job_at ON audit_log (tenant, job, at DESC, id DESC);
DROP INDEX audit_log_job;
