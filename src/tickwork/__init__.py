"""tickwork: a Kubernetes-native distributed job scheduler on sharded PostgreSQL."""

__version__ = "0.1.0"
