"""An emulated Kubernetes API server for tests: see ``README.md`` in this folder."""
