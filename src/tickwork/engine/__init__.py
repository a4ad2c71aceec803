"""The engine: jobs, dispatch, the scheduler loops, materialiser, quotas,
manifests and metrics, on top of the store. Imports no web, CLI or Kubernetes
framework."""
