"""The HTTP API: the public contract of ``docs/http-api.md``."""
