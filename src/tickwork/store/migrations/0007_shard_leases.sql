-- tickwork shard schema, version 7: shard ownership without Kubernetes (the postgres
-- coordination backend of `tickwork scheduler` and `tickwork dev`).
--
-- shard_lease: who SHOULD schedule this shard, with the fields of a Kubernetes Lease
-- (holder, duration, acquire and renew times, transitions). Each shard keeps its own
-- lease, so a shard whose database is down takes no part in the coordination of the
-- others; a replica takes or renews it with one conditional UPDATE, judged on the
-- database clock. Whose writes count stays shard_epoch's job.
--
-- scheduler_members: the replicas that announced themselves, renewed like the lease.
-- Every replica writes its row into every shard, so the live members can be read from
-- any shard that answers.

CREATE TABLE shard_lease (
    singleton      boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    holder         text,
    lease_seconds  double precision NOT NULL DEFAULT 10 CHECK (lease_seconds > 0),
    acquired_at    timestamptz,
    renewed_at     timestamptz,
    transitions    bigint NOT NULL DEFAULT 0 CHECK (transitions >= 0)
);
INSERT INTO shard_lease DEFAULT VALUES;

CREATE TABLE scheduler_members (
    identity       text PRIMARY KEY,
    lease_seconds  double precision NOT NULL CHECK (lease_seconds > 0),
    renewed_at     timestamptz NOT NULL
);
