"""Shard ownership: which scheduler replica works on which shard.

One seam (``backend.Backend``), two backends that pass the same contract tests:
``kubernetes`` (a ``coordination.k8s.io/v1`` Lease per shard, ``tickwork-shard-{n}``,
and one per replica, ``tickwork-member-{identity}``) and ``postgres`` (the same in
each shard's own tables). The ``coordinator.Coordinator`` renews what it holds, aims at
``ceil(S / live replicas)`` shards, takes free or expired ones and sheds extras
gracefully; it says which shards a replica may write to, and stops saying so before
its leases can have expired for the others. Whose writes count is decided in each
shard's database (``store.epochs``), not here.
"""
