"""The core: pure rules and shared types (spec, cron, shards, errors, clock,
limits, records). Imports no framework and no other tickwork layer."""
