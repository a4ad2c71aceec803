-- The schema of one tickwork shard, as a freshly migrated shard describes itself.
-- Written by `make schema`; the migration tests check every migrated shard against
-- it. Do not edit it by hand: write a migration, then run `make schema`.

-- migration 0001_initial
-- migration 0002_run_concurrency
-- migration 0003_request_fingerprint
-- migration 0004_audit_by_time
-- migration 0005_live_and_finished_runs
-- migration 0006_kubernetes
-- migration 0007_shard_leases
-- migration 0008_shard_last_pass
-- migration 0009_audit_by_age
-- migration 0010_reshard
-- migration 0011_hot_path
-- migration 0012_lease_indexes
-- migration 0013_definition_run_fields
-- migration 0014_overlap_policy
-- migration 0015_snooze_and_auto_pause
-- migration 0016_unique_and_debounce
-- migration 0017_rate_limits_and_keyed_concurrency
-- migration 0018_bulk_operations
-- migration 0019_queue_pauses
-- migration 0020_notifications
-- migration 0021_notification_watches

CREATE SEQUENCE audit_log_id_seq AS bigint START WITH 1 INCREMENT BY 1;

CREATE SEQUENCE fencing_tokens AS bigint START WITH 1 INCREMENT BY 1;

CREATE SEQUENCE run_ids AS bigint START WITH 1 INCREMENT BY 1;

CREATE TABLE attempts (
    run_id bigint NOT NULL,
    attempt integer NOT NULL,
    fencing_token bigint NOT NULL,
    worker_id text,
    leased_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone NOT NULL,
    outcome text NOT NULL,
    result_state text NOT NULL,
    next_attempt_at timestamp with time zone,
    error jsonb
) PARTITION BY RANGE (finished_at);
ALTER TABLE attempts ADD CONSTRAINT attempts_outcome_check CHECK ((outcome = ANY (ARRAY['succeeded'::text, 'failed'::text, 'lease-expired'::text, 'cancelled'::text, 'snoozed'::text])));
CREATE INDEX attempts_run ON ONLY attempts USING btree (run_id, attempt);

CREATE TABLE attempts_default (
    run_id bigint NOT NULL,
    attempt integer NOT NULL,
    fencing_token bigint NOT NULL,
    worker_id text,
    leased_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone NOT NULL,
    outcome text NOT NULL,
    result_state text NOT NULL,
    next_attempt_at timestamp with time zone,
    error jsonb
) PARTITION OF attempts DEFAULT;
ALTER TABLE attempts_default ADD CONSTRAINT attempts_outcome_check CHECK ((outcome = ANY (ARRAY['succeeded'::text, 'failed'::text, 'lease-expired'::text, 'cancelled'::text, 'snoozed'::text])));
CREATE INDEX attempts_default_run_id_attempt_idx ON attempts_default USING btree (run_id, attempt);

CREATE TABLE audit_log (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    at timestamp with time zone NOT NULL,
    tenant text NOT NULL,
    job text NOT NULL,
    run_id bigint,
    action text NOT NULL,
    actor text NOT NULL,
    detail jsonb
);
ALTER TABLE audit_log ADD CONSTRAINT audit_log_pkey PRIMARY KEY (id);
CREATE INDEX audit_log_at ON audit_log USING btree (at);
CREATE INDEX audit_log_job_at ON audit_log USING btree (tenant, job, at DESC, id DESC);
CREATE INDEX audit_log_notify ON audit_log USING btree (tenant, at DESC, id DESC) WHERE (action = 'notify'::text);
CREATE UNIQUE INDEX audit_log_pkey ON audit_log USING btree (id);
CREATE INDEX audit_log_tenant_at ON audit_log USING btree (tenant, at DESC, id DESC);

CREATE TABLE changed_jobs (
    tenant text NOT NULL,
    job text NOT NULL
);
ALTER TABLE changed_jobs ADD CONSTRAINT changed_jobs_pkey PRIMARY KEY (tenant, job);
CREATE UNIQUE INDEX changed_jobs_pkey ON changed_jobs USING btree (tenant, job);

CREATE TABLE definitions (
    tenant text NOT NULL,
    name text NOT NULL,
    spec jsonb NOT NULL,
    queue text NOT NULL,
    priority smallint NOT NULL,
    paused boolean NOT NULL DEFAULT false,
    next_due_at timestamp with time zone,
    missed_dropped integer NOT NULL DEFAULT 0,
    generation bigint NOT NULL DEFAULT 1,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    managed_by text,
    missed_caught_up bigint NOT NULL DEFAULT 0,
    overlap_skipped bigint NOT NULL DEFAULT 0,
    consecutive_dead integer NOT NULL DEFAULT 0,
    paused_reason jsonb
);
ALTER TABLE definitions ADD CONSTRAINT definitions_managed_by_check CHECK ((managed_by = ANY (ARRAY['kubernetes'::text, 'manifests'::text])));
ALTER TABLE definitions ADD CONSTRAINT definitions_pkey PRIMARY KEY (tenant, name);
ALTER TABLE definitions ADD CONSTRAINT definitions_priority_check CHECK (((priority >= 0) AND (priority <= 2)));
CREATE INDEX definitions_due ON definitions USING btree (next_due_at) WHERE ((NOT paused) AND (next_due_at IS NOT NULL));
CREATE INDEX definitions_managed ON definitions USING btree (managed_by, tenant, name) WHERE (managed_by IS NOT NULL);
CREATE INDEX definitions_notify_watched ON definitions USING btree (tenant, name) WHERE ((spec -> 'notify'::text) ?| ARRAY['deadline'::text, 'leasedLongerThanSeconds'::text]);
CREATE UNIQUE INDEX definitions_pkey ON definitions USING btree (tenant, name);

CREATE TABLE enqueue_buckets (
    tenant text NOT NULL,
    tokens double precision NOT NULL,
    at timestamp with time zone NOT NULL,
    admitted boolean NOT NULL,
    taken double precision NOT NULL DEFAULT 0
);
ALTER TABLE enqueue_buckets ADD CONSTRAINT enqueue_buckets_pkey PRIMARY KEY (tenant);
CREATE UNIQUE INDEX enqueue_buckets_pkey ON enqueue_buckets USING btree (tenant);

CREATE TABLE enqueue_keys (
    tenant text NOT NULL,
    job text NOT NULL,
    key text NOT NULL,
    run_id bigint,
    taken_at timestamp with time zone NOT NULL
);
ALTER TABLE enqueue_keys ADD CONSTRAINT enqueue_keys_pkey PRIMARY KEY (tenant, job, key);
CREATE UNIQUE INDEX enqueue_keys_pkey ON enqueue_keys USING btree (tenant, job, key);
CREATE INDEX enqueue_keys_taken ON enqueue_keys USING btree (taken_at);

CREATE TABLE finished_runs (
    id bigint NOT NULL,
    tenant text NOT NULL,
    job text NOT NULL,
    queue text NOT NULL,
    priority smallint NOT NULL,
    state text NOT NULL,
    origin text NOT NULL,
    attempt integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL,
    retry_base double precision NOT NULL,
    retry_max double precision NOT NULL,
    timeout_seconds integer NOT NULL,
    due_at timestamp with time zone NOT NULL,
    ready_at timestamp with time zone NOT NULL,
    start_deadline timestamp with time zone,
    idempotency_key text,
    payload jsonb,
    fencing_token bigint,
    lease_owner text,
    leased_at timestamp with time zone,
    lease_expires_at timestamp with time zone,
    deadline timestamp with time zone,
    cancel_requested boolean NOT NULL DEFAULT false,
    last_error jsonb,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone NOT NULL,
    concurrency integer NOT NULL DEFAULT 0,
    request_fingerprint bytea
) PARTITION BY RANGE (finished_at);
ALTER TABLE finished_runs ADD CONSTRAINT finished_runs_state_check CHECK ((state = ANY (ARRAY['succeeded'::text, 'dead'::text, 'cancelled'::text, 'discarded'::text, 'skipped'::text])));
CREATE INDEX finished_runs_by_job ON ONLY finished_runs USING btree (tenant, job, id DESC);
CREATE INDEX finished_runs_dead ON ONLY finished_runs USING btree (tenant, finished_at DESC, id DESC) WHERE (state = 'dead'::text);
CREATE INDEX finished_runs_dead_by_id ON ONLY finished_runs USING btree (tenant, id) WHERE (state = 'dead'::text);
CREATE INDEX finished_runs_dead_by_job ON ONLY finished_runs USING btree (tenant, job) WHERE (state = 'dead'::text);
CREATE INDEX finished_runs_id ON ONLY finished_runs USING btree (id);

CREATE TABLE finished_runs_default (
    id bigint NOT NULL,
    tenant text NOT NULL,
    job text NOT NULL,
    queue text NOT NULL,
    priority smallint NOT NULL,
    state text NOT NULL,
    origin text NOT NULL,
    attempt integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL,
    retry_base double precision NOT NULL,
    retry_max double precision NOT NULL,
    timeout_seconds integer NOT NULL,
    due_at timestamp with time zone NOT NULL,
    ready_at timestamp with time zone NOT NULL,
    start_deadline timestamp with time zone,
    idempotency_key text,
    payload jsonb,
    fencing_token bigint,
    lease_owner text,
    leased_at timestamp with time zone,
    lease_expires_at timestamp with time zone,
    deadline timestamp with time zone,
    cancel_requested boolean NOT NULL DEFAULT false,
    last_error jsonb,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone NOT NULL,
    concurrency integer NOT NULL DEFAULT 0,
    request_fingerprint bytea
) PARTITION OF finished_runs DEFAULT;
ALTER TABLE finished_runs_default ADD CONSTRAINT finished_runs_state_check CHECK ((state = ANY (ARRAY['succeeded'::text, 'dead'::text, 'cancelled'::text, 'discarded'::text, 'skipped'::text])));
CREATE INDEX finished_runs_default_id_idx ON finished_runs_default USING btree (id);
CREATE INDEX finished_runs_default_tenant_finished_at_id_idx ON finished_runs_default USING btree (tenant, finished_at DESC, id DESC) WHERE (state = 'dead'::text);
CREATE INDEX finished_runs_default_tenant_id_idx ON finished_runs_default USING btree (tenant, id) WHERE (state = 'dead'::text);
CREATE INDEX finished_runs_default_tenant_job_id_idx ON finished_runs_default USING btree (tenant, job, id DESC);
CREATE INDEX finished_runs_default_tenant_job_idx ON finished_runs_default USING btree (tenant, job) WHERE (state = 'dead'::text);

CREATE TABLE live_runs (
    id bigint NOT NULL DEFAULT nextval('run_ids'::regclass),
    tenant text NOT NULL,
    job text NOT NULL,
    queue text NOT NULL,
    priority smallint NOT NULL,
    state text NOT NULL,
    origin text NOT NULL,
    attempt integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL,
    retry_base double precision NOT NULL,
    retry_max double precision NOT NULL,
    timeout_seconds integer NOT NULL,
    due_at timestamp with time zone NOT NULL,
    ready_at timestamp with time zone NOT NULL,
    start_deadline timestamp with time zone,
    idempotency_key text,
    payload jsonb,
    fencing_token bigint,
    lease_owner text,
    leased_at timestamp with time zone,
    lease_expires_at timestamp with time zone,
    deadline timestamp with time zone,
    cancel_requested boolean NOT NULL DEFAULT false,
    last_error jsonb,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone,
    concurrency integer NOT NULL DEFAULT 0,
    request_fingerprint bytea,
    dry_run boolean NOT NULL DEFAULT false,
    overlap text,
    snoozes integer NOT NULL DEFAULT 0,
    concurrency_key text,
    concurrency_strategy text,
    rate_key text,
    rate_limit integer,
    rate_period double precision
);
ALTER TABLE live_runs ADD CONSTRAINT live_runs_concurrency_check CHECK ((concurrency >= 0));
ALTER TABLE live_runs ADD CONSTRAINT live_runs_max_attempts_check CHECK ((max_attempts >= 1));
ALTER TABLE live_runs ADD CONSTRAINT live_runs_origin_check CHECK ((origin = ANY (ARRAY['cron'::text, 'once'::text, 'api'::text])));
ALTER TABLE live_runs ADD CONSTRAINT live_runs_pkey PRIMARY KEY (id);
ALTER TABLE live_runs ADD CONSTRAINT live_runs_priority_check CHECK (((priority >= 0) AND (priority <= 2)));
ALTER TABLE live_runs ADD CONSTRAINT live_runs_state_check CHECK ((state = ANY (ARRAY['scheduled'::text, 'ready'::text, 'leased'::text, 'retry_wait'::text])));
CREATE INDEX live_runs_by_job ON live_runs USING btree (tenant, job, id DESC) WHERE (state <> 'leased'::text);
CREATE INDEX live_runs_claimable ON live_runs USING btree (queue, priority, tenant, ready_at, id) WHERE ((state = 'ready'::text) AND (concurrency = 0));
CREATE INDEX live_runs_flow ON live_runs USING btree (queue, priority, tenant, job, COALESCE(concurrency_key, ''::text), COALESCE(rate_key, ''::text), ready_at, id) WHERE ((state = 'ready'::text) AND (concurrency > 0));
CREATE INDEX live_runs_keyed_leased ON live_runs USING btree (tenant, concurrency_key) WHERE ((state = 'leased'::text) AND (concurrency_key IS NOT NULL));
CREATE INDEX live_runs_leased ON live_runs USING btree (tenant, job, id DESC) WHERE (state = 'leased'::text);
CREATE INDEX live_runs_limited ON live_runs USING btree (queue, priority, tenant, job, ready_at, id) WHERE ((state = 'ready'::text) AND (concurrency > 0));
CREATE INDEX live_runs_limited_leased ON live_runs USING btree (tenant, job) WHERE ((state = 'leased'::text) AND (concurrency > 0));
CREATE INDEX live_runs_overlap_due ON live_runs USING btree (ready_at) WHERE ((state = 'scheduled'::text) AND (overlap IS NOT NULL));
CREATE UNIQUE INDEX live_runs_pkey ON live_runs USING btree (id);
CREATE INDEX live_runs_start_deadline ON live_runs USING btree (start_deadline) WHERE ((start_deadline IS NOT NULL) AND (attempt = 0) AND (state = ANY (ARRAY['scheduled'::text, 'ready'::text])));
CREATE INDEX live_runs_waiting ON live_runs USING btree (ready_at) WHERE (state = ANY (ARRAY['scheduled'::text, 'retry_wait'::text]));
CREATE TRIGGER live_runs_flow_fields BEFORE INSERT ON live_runs FOR EACH ROW WHEN ((new.concurrency > 0)) EXECUTE FUNCTION live_runs_flow_fields();

CREATE TABLE moved_runs (
    run_id bigint NOT NULL,
    shard integer NOT NULL,
    moved_at timestamp with time zone NOT NULL
);
ALTER TABLE moved_runs ADD CONSTRAINT moved_runs_pkey PRIMARY KEY (run_id);
ALTER TABLE moved_runs ADD CONSTRAINT moved_runs_shard_check CHECK ((shard >= 0));
CREATE UNIQUE INDEX moved_runs_pkey ON moved_runs USING btree (run_id);

CREATE TABLE notification_targets (
    tenant text NOT NULL,
    name text NOT NULL,
    url text NOT NULL,
    format text NOT NULL,
    secret_ref jsonb,
    is_default boolean NOT NULL DEFAULT false,
    updated_at timestamp with time zone NOT NULL,
    actor text NOT NULL
);
ALTER TABLE notification_targets ADD CONSTRAINT notification_targets_format_check CHECK ((format = ANY (ARRAY['json'::text, 'slack'::text])));
ALTER TABLE notification_targets ADD CONSTRAINT notification_targets_pkey PRIMARY KEY (tenant, name);
CREATE UNIQUE INDEX notification_targets_default ON notification_targets USING btree (tenant) WHERE is_default;
CREATE UNIQUE INDEX notification_targets_pkey ON notification_targets USING btree (tenant, name);

CREATE TABLE operations (
    id text NOT NULL,
    tenant text NOT NULL,
    action text NOT NULL,
    filter jsonb NOT NULL,
    state text NOT NULL,
    total bigint NOT NULL,
    processed bigint NOT NULL DEFAULT 0,
    cursor bigint NOT NULL DEFAULT 0,
    actor text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone
);
ALTER TABLE operations ADD CONSTRAINT operations_action_check CHECK ((action = ANY (ARRAY['replay'::text, 'discard'::text, 'cancel'::text])));
ALTER TABLE operations ADD CONSTRAINT operations_pkey PRIMARY KEY (id);
ALTER TABLE operations ADD CONSTRAINT operations_state_check CHECK ((state = ANY (ARRAY['running'::text, 'done'::text, 'cancelled'::text])));
CREATE INDEX operations_by_tenant ON operations USING btree (tenant, created_at DESC, id DESC);
CREATE UNIQUE INDEX operations_pkey ON operations USING btree (id);
CREATE INDEX operations_running ON operations USING btree (created_at, id) WHERE (state = 'running'::text);

CREATE TABLE queue_pauses (
    tenant text NOT NULL,
    queue text NOT NULL,
    paused_at timestamp with time zone NOT NULL,
    actor text NOT NULL
);
ALTER TABLE queue_pauses ADD CONSTRAINT queue_pauses_pkey PRIMARY KEY (tenant, queue);
CREATE UNIQUE INDEX queue_pauses_pkey ON queue_pauses USING btree (tenant, queue);

CREATE TABLE rate_windows (
    tenant text NOT NULL,
    key text NOT NULL,
    slot timestamp with time zone NOT NULL,
    leased integer NOT NULL
);
ALTER TABLE rate_windows ADD CONSTRAINT rate_windows_pkey PRIMARY KEY (tenant, key, slot);
CREATE UNIQUE INDEX rate_windows_pkey ON rate_windows USING btree (tenant, key, slot);

CREATE TABLE reshard_journal (
    from_count integer NOT NULL,
    to_count integer NOT NULL,
    role text NOT NULL,
    phase text NOT NULL,
    moved_jobs bigint NOT NULL DEFAULT 0,
    moved_runs bigint NOT NULL DEFAULT 0,
    started_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone
);
ALTER TABLE reshard_journal ADD CONSTRAINT reshard_journal_check CHECK ((to_count = (2 * from_count)));
ALTER TABLE reshard_journal ADD CONSTRAINT reshard_journal_from_count_check CHECK ((from_count >= 1));
ALTER TABLE reshard_journal ADD CONSTRAINT reshard_journal_moved_jobs_check CHECK ((moved_jobs >= 0));
ALTER TABLE reshard_journal ADD CONSTRAINT reshard_journal_moved_runs_check CHECK ((moved_runs >= 0));
ALTER TABLE reshard_journal ADD CONSTRAINT reshard_journal_phase_check CHECK ((phase = ANY (ARRAY['moving'::text, 'done'::text])));
ALTER TABLE reshard_journal ADD CONSTRAINT reshard_journal_pkey PRIMARY KEY (from_count, to_count);
ALTER TABLE reshard_journal ADD CONSTRAINT reshard_journal_role_check CHECK ((role = ANY (ARRAY['source'::text, 'target'::text])));
CREATE UNIQUE INDEX reshard_journal_pkey ON reshard_journal USING btree (from_count, to_count);

CREATE TABLE run_keys (
    tenant text NOT NULL,
    job text NOT NULL,
    due_at timestamp with time zone,
    idempotency_key text,
    run_id bigint NOT NULL,
    created_at timestamp with time zone NOT NULL,
    request_fingerprint bytea
);
ALTER TABLE run_keys ADD CONSTRAINT run_keys_check CHECK (((due_at IS NOT NULL) OR (idempotency_key IS NOT NULL)));
CREATE INDEX run_keys_created ON run_keys USING btree (created_at);
CREATE UNIQUE INDEX run_keys_cron_due ON run_keys USING btree (tenant, job, due_at) WHERE (due_at IS NOT NULL);
CREATE UNIQUE INDEX run_keys_idempotency ON run_keys USING btree (tenant, job, idempotency_key) WHERE (idempotency_key IS NOT NULL);

CREATE TABLE scheduler_members (
    identity text NOT NULL,
    lease_seconds double precision NOT NULL,
    renewed_at timestamp with time zone NOT NULL
);
ALTER TABLE scheduler_members ADD CONSTRAINT scheduler_members_lease_seconds_check CHECK ((lease_seconds > (0)::double precision));
ALTER TABLE scheduler_members ADD CONSTRAINT scheduler_members_pkey PRIMARY KEY (identity);
CREATE UNIQUE INDEX scheduler_members_pkey ON scheduler_members USING btree (identity);

CREATE TABLE schema_version (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone NOT NULL DEFAULT now(),
    compatible_from integer
);
ALTER TABLE schema_version ADD CONSTRAINT schema_version_pkey PRIMARY KEY (version);
CREATE UNIQUE INDEX schema_version_pkey ON schema_version USING btree (version);

CREATE TABLE shard_epoch (
    singleton boolean NOT NULL DEFAULT true,
    epoch bigint NOT NULL DEFAULT 0,
    owner text,
    acquired_at timestamp with time zone,
    last_pass_at timestamp with time zone
);
ALTER TABLE shard_epoch ADD CONSTRAINT shard_epoch_pkey PRIMARY KEY (singleton);
ALTER TABLE shard_epoch ADD CONSTRAINT shard_epoch_singleton_check CHECK (singleton);
CREATE UNIQUE INDEX shard_epoch_pkey ON shard_epoch USING btree (singleton);

CREATE TABLE shard_lease (
    singleton boolean NOT NULL DEFAULT true,
    holder text,
    lease_seconds double precision NOT NULL DEFAULT 10,
    acquired_at timestamp with time zone,
    renewed_at timestamp with time zone,
    transitions bigint NOT NULL DEFAULT 0
);
ALTER TABLE shard_lease ADD CONSTRAINT shard_lease_lease_seconds_check CHECK ((lease_seconds > (0)::double precision));
ALTER TABLE shard_lease ADD CONSTRAINT shard_lease_pkey PRIMARY KEY (singleton);
ALTER TABLE shard_lease ADD CONSTRAINT shard_lease_singleton_check CHECK (singleton);
ALTER TABLE shard_lease ADD CONSTRAINT shard_lease_transitions_check CHECK ((transitions >= 0));
CREATE UNIQUE INDEX shard_lease_pkey ON shard_lease USING btree (singleton);

CREATE TABLE shard_meta (
    singleton boolean NOT NULL DEFAULT true,
    shard integer NOT NULL,
    shard_count integer NOT NULL,
    created_at timestamp with time zone NOT NULL DEFAULT now()
);
ALTER TABLE shard_meta ADD CONSTRAINT shard_meta_check CHECK ((shard_count > shard));
ALTER TABLE shard_meta ADD CONSTRAINT shard_meta_pkey PRIMARY KEY (singleton);
ALTER TABLE shard_meta ADD CONSTRAINT shard_meta_shard_check CHECK ((shard >= 0));
ALTER TABLE shard_meta ADD CONSTRAINT shard_meta_singleton_check CHECK (singleton);
CREATE UNIQUE INDEX shard_meta_pkey ON shard_meta USING btree (singleton);

CREATE VIEW definition_run_fields AS SELECT tenant,
    name,
    queue,
    priority,
    COALESCE(((spec #>> '{retry,maxAttempts}'::text[]))::integer, 3) AS max_attempts,
    COALESCE(((spec #>> '{retry,baseSeconds}'::text[]))::double precision, (30)::double precision) AS retry_base,
    COALESCE(((spec #>> '{retry,maxSeconds}'::text[]))::double precision, (1800)::double precision) AS retry_max,
    COALESCE(((spec ->> 'timeoutSeconds'::text))::integer, 3600) AS timeout_seconds,
    COALESCE(((spec ->> 'concurrency'::text))::integer, 0) AS concurrency,
    COALESCE(((spec ->> 'dryRun'::text))::boolean, false) AS dry_run,
    (spec -> 'payload'::text) AS payload
   FROM definitions;

CREATE VIEW run_attempts AS SELECT attempts.run_id,
    attempts.attempt,
    attempts.fencing_token,
    attempts.worker_id,
    attempts.leased_at,
    attempts.finished_at,
    attempts.outcome,
    attempts.result_state,
    attempts.next_attempt_at,
    attempts.error
   FROM attempts
UNION ALL
 SELECT f.id AS run_id,
    f.attempt,
    f.fencing_token,
    f.lease_owner AS worker_id,
    f.leased_at,
    f.finished_at,
    'succeeded'::text AS outcome,
    'succeeded'::text AS result_state,
    NULL::timestamp with time zone AS next_attempt_at,
    NULL::jsonb AS error
   FROM finished_runs f
  WHERE ((f.state = 'succeeded'::text) AND (f.fencing_token IS NOT NULL) AND (f.leased_at IS NOT NULL) AND (NOT (EXISTS ( SELECT 1
           FROM attempts a
          WHERE ((a.run_id = f.id) AND (a.fencing_token = f.fencing_token))))));

CREATE VIEW runs AS SELECT live_runs.id,
    live_runs.tenant,
    live_runs.job,
    live_runs.queue,
    live_runs.priority,
    live_runs.state,
    live_runs.origin,
    live_runs.attempt,
    live_runs.max_attempts,
    live_runs.retry_base,
    live_runs.retry_max,
    live_runs.timeout_seconds,
    live_runs.due_at,
    live_runs.ready_at,
    live_runs.start_deadline,
    live_runs.idempotency_key,
    live_runs.payload,
    live_runs.fencing_token,
    live_runs.lease_owner,
    live_runs.leased_at,
    live_runs.lease_expires_at,
    live_runs.deadline,
    live_runs.cancel_requested,
    live_runs.last_error,
    live_runs.created_at,
    live_runs.updated_at,
    live_runs.finished_at,
    live_runs.concurrency,
    live_runs.request_fingerprint
   FROM live_runs
  WHERE (live_runs.state <> 'leased'::text)
UNION ALL
 SELECT live_runs.id,
    live_runs.tenant,
    live_runs.job,
    live_runs.queue,
    live_runs.priority,
    live_runs.state,
    live_runs.origin,
    live_runs.attempt,
    live_runs.max_attempts,
    live_runs.retry_base,
    live_runs.retry_max,
    live_runs.timeout_seconds,
    live_runs.due_at,
    live_runs.ready_at,
    live_runs.start_deadline,
    live_runs.idempotency_key,
    live_runs.payload,
    live_runs.fencing_token,
    live_runs.lease_owner,
    live_runs.leased_at,
    live_runs.lease_expires_at,
    live_runs.deadline,
    live_runs.cancel_requested,
    live_runs.last_error,
    live_runs.created_at,
    live_runs.updated_at,
    live_runs.finished_at,
    live_runs.concurrency,
    live_runs.request_fingerprint
   FROM live_runs
  WHERE (live_runs.state = 'leased'::text)
UNION ALL
 SELECT finished_runs.id,
    finished_runs.tenant,
    finished_runs.job,
    finished_runs.queue,
    finished_runs.priority,
    finished_runs.state,
    finished_runs.origin,
    finished_runs.attempt,
    finished_runs.max_attempts,
    finished_runs.retry_base,
    finished_runs.retry_max,
    finished_runs.timeout_seconds,
    finished_runs.due_at,
    finished_runs.ready_at,
    finished_runs.start_deadline,
    finished_runs.idempotency_key,
    finished_runs.payload,
    finished_runs.fencing_token,
    finished_runs.lease_owner,
    finished_runs.leased_at,
    finished_runs.lease_expires_at,
    finished_runs.deadline,
    finished_runs.cancel_requested,
    finished_runs.last_error,
    finished_runs.created_at,
    finished_runs.updated_at,
    finished_runs.finished_at,
    finished_runs.concurrency,
    finished_runs.request_fingerprint
   FROM finished_runs;

CREATE OR REPLACE FUNCTION flow_key_value(payload jsonb, pointer text)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT CASE WHEN pointer IS NULL THEN ''
                WHEN length(v) > 128 THEN 'md5:' || md5(v)
                ELSE v END
    FROM (SELECT coalesce(
                     payload #>> ARRAY(SELECT replace(replace(part, '~1', '/'), '~0', '~')
                                       FROM unnest(string_to_array(substr(pointer, 2), '/'))
                                            WITH ORDINALITY AS p(part, n)
                                       ORDER BY n),
                     '') AS v) AS found
$function$
;

CREATE OR REPLACE FUNCTION live_runs_flow_fields()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
    spec jsonb;
BEGIN
    SELECT d.spec INTO spec FROM definitions AS d
    WHERE d.tenant = NEW.tenant AND d.name = NEW.job;
    IF spec ? 'concurrencyKey' THEN
        NEW.concurrency_key :=
            coalesce('group/' || (spec #>> '{concurrencyKey,group}'), 'job/' || NEW.job)
            || chr(31)
            || flow_key_value(NEW.payload, spec #>> '{concurrencyKey,key}');
        NEW.concurrency_strategy := spec #>> '{concurrencyKey,strategy}';
    END IF;
    IF spec ? 'rateLimit' THEN
        NEW.rate_key := 'job/' || NEW.job || chr(31)
            || flow_key_value(NEW.payload, spec #>> '{rateLimit,key}');
        NEW.rate_limit := (spec #>> '{rateLimit,limit}')::integer;
        NEW.rate_period := (spec #>> '{rateLimit,periodSeconds}')::double precision;
    END IF;
    RETURN NEW;
END
$function$
;

CREATE OR REPLACE FUNCTION run_concurrency(spec jsonb)
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT CASE WHEN coalesce((spec ->> 'concurrency')::integer, 0) > 0
                    THEN (spec ->> 'concurrency')::integer
                WHEN spec ? 'rateLimit' THEN 2147483647
                ELSE 0 END
$function$
;
