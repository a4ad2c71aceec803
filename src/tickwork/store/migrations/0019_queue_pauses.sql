-- tickwork shard schema, version 19: paused queues.
-- compatible-from: 13
--
-- queue_pauses: a tenant's queues whose runs no claim leases (enqueues are still taken).
-- Every shard holds every pause of every tenant: a queue's runs span the shards, and each
-- shard's claim decides alone, in its own statement, from its own copy. The table stays
-- tiny (what is paused now), so the claim's probe of it is one index lookup per head.
-- The previous release's claims do not read it: during an upgrade its dispatchers still
-- lease from a paused queue (docs/operations.md, Upgrade).

CREATE TABLE queue_pauses (
    tenant text NOT NULL,
    queue text NOT NULL,
    paused_at timestamptz NOT NULL,
    actor text NOT NULL,
    PRIMARY KEY (tenant, queue)
);
