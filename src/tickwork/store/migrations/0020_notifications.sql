-- tickwork shard schema, version 20: notification targets.
-- compatible-from: 13
--
-- Expand only: the code of release 13 runs against it as it did (it reads and writes
-- nothing added here).
--
-- notification_targets: a tenant's webhooks, by name. Every shard holds every target
-- of every tenant, as queue_pauses does: a run that goes dead on a shard names its
-- notification's target in the statement that ends it, from that shard's own copy.
-- secret_ref names where the scheduler process reads the HMAC key (an environment
-- variable or a file), never the key itself. is_default: used for every job of the
-- tenant that has no `notify` of its own (at most one per tenant).

CREATE TABLE notification_targets (
    tenant text NOT NULL,
    name text NOT NULL,
    url text NOT NULL,
    format text NOT NULL CHECK (format IN ('json', 'slack')),
    secret_ref jsonb,
    is_default boolean NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL,
    actor text NOT NULL,
    PRIMARY KEY (tenant, name)
);

CREATE UNIQUE INDEX notification_targets_default ON notification_targets (tenant)
    WHERE is_default;
