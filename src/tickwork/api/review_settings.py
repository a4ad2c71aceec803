"""What Kubernetes-native authentication (``kubernetes_auth``) is told, apart from the
client, so the command line builds it without the Kubernetes extra installed."""

from __future__ import annotations

from dataclasses import dataclass

from tickwork.core.settings import DEFAULT_AUDIENCES


@dataclass(frozen=True, slots=True)
class ReviewSettings:
    """How the dispatcher uses the API server for authentication."""

    # Seconds an answer (a token's user, an allowed action) is reused.
    cache_seconds: float = 10.0
    # Seconds a refusal (an unknown token, a denied action) is reused: shorter, so a
    # RoleBinding just applied takes effect soon.
    negative_cache_seconds: float = 5.0
    # Entries each cache holds at most (least recently used go first).
    cache_size: int = 10_000
    # Seconds one review may take before the call is refused with 503.
    timeout_seconds: float = 2.0
    # Audiences the token must be valid for: a worker's projected token is issued for
    # ``tickwork``, so a token that also opens the API server is refused unless named.
    # Empty: the API server's own (any pod's default token would do).
    audiences: tuple[str, ...] = DEFAULT_AUDIENCES
