-- tickwork shard schema, version 9: the audit log has a retention (a year by default),
-- so the scheduler deletes entries by age; this index lets it find the oldest without
-- reading the whole log.

CREATE INDEX audit_log_at ON audit_log (at);
