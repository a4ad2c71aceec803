-- tickwork shard schema, version 17: rate limits at claim time and keyed concurrency.
-- compatible-from: 13
--
-- Expand only: the code of release 13 runs against it as it did. It reads none of what
-- is added here. A run of a job with flow control carries `concurrency` > 0 (its job's
-- limit, or the largest integer for a job with a rate limit and no concurrency limit,
-- see run_concurrency): the previous release claims such runs on its limited path, a
-- job at a time, so during an upgrade it keeps each job under its own `concurrency`
-- (stricter than a per-key limit) but does not apply rate limits.
--
-- live_runs.concurrency_key: the bucket of a keyed or grouped concurrency limit
-- (`job/<job>` or `group/<group>`, chr(31), the key's value in the payload); NULL: the
-- job's own limit, as before. concurrency_strategy: what the newest arrival does when
-- its key is at the limit (NULL: wait). rate_key (`job/<job>`, chr(31), the key's
-- value), rate_limit and rate_period: the job's rateLimit; NULL: none. All nullable:
-- instant changes, no row rewritten.
-- live_runs_flow: the limited runs' skip-scan heads, one per (job, concurrency key, rate
-- key), so one key at its limit never hides another key's runs behind it.
-- live_runs_keyed_leased: leased runs per key, counted at each claim.
-- rate_windows: runs leased per (tenant, rate key) in slots of 1/64 of the period, the
-- slot named by its end (the sliding window of docs/flow-control.md).

ALTER TABLE live_runs ADD COLUMN concurrency_key text;
ALTER TABLE live_runs ADD COLUMN concurrency_strategy text;
ALTER TABLE live_runs ADD COLUMN rate_key text;
ALTER TABLE live_runs ADD COLUMN rate_limit integer;
ALTER TABLE live_runs ADD COLUMN rate_period double precision;

CREATE INDEX live_runs_flow ON live_runs
    (queue, priority, tenant, job, (coalesce(concurrency_key, '')),
     (coalesce(rate_key, '')), ready_at, id)
    WHERE state = 'ready' AND concurrency > 0;
CREATE INDEX live_runs_keyed_leased ON live_runs (tenant, concurrency_key)
    WHERE state = 'leased' AND concurrency_key IS NOT NULL;

CREATE TABLE rate_windows (
    tenant text NOT NULL,
    key text NOT NULL,
    slot timestamptz NOT NULL,
    leased integer NOT NULL,
    PRIMARY KEY (tenant, key, slot)
);

-- The `concurrency` a run of a job with this spec carries: its limit, else the largest
-- integer when the job has a rate limit (on the limited path, no concurrency limit),
-- else 0 (the plain path).
CREATE FUNCTION run_concurrency(spec jsonb) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN coalesce((spec ->> 'concurrency')::integer, 0) > 0
                    THEN (spec ->> 'concurrency')::integer
                WHEN spec ? 'rateLimit' THEN 2147483647
                ELSE 0 END
$$;

-- The text at a JSON pointer (RFC 6901) of a payload, as a bucket name takes it: ''
-- where the payload has nothing there (or no pointer is given), a digest for a value too
-- long for an index.
CREATE FUNCTION flow_key_value(payload jsonb, pointer text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN pointer IS NULL THEN ''
                WHEN length(v) > 128 THEN 'md5:' || md5(v)
                ELSE v END
    FROM (SELECT coalesce(
                     payload #>> ARRAY(SELECT replace(replace(part, '~1', '/'), '~0', '~')
                                       FROM unnest(string_to_array(substr(pointer, 2), '/'))
                                            WITH ORDINALITY AS p(part, n)
                                       ORDER BY n),
                     '') AS v) AS found
$$;

-- Every insert path (enqueue, batch, materialiser, DLQ replay, a reshard's move) gets
-- the flow columns of a limited run from its job's stored spec; runs of the plain path
-- (concurrency 0) do not call it.
CREATE FUNCTION live_runs_flow_fields() RETURNS trigger
LANGUAGE plpgsql AS $$
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
$$;

CREATE TRIGGER live_runs_flow_fields BEFORE INSERT ON live_runs
    FOR EACH ROW WHEN (NEW.concurrency > 0) EXECUTE FUNCTION live_runs_flow_fields();
