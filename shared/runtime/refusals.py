"""What the ingress client refuses or cannot do, as exceptions its callers map to answers (the
HTTP ingress to statuses, with Retry-After where a retry may succeed)."""

from __future__ import annotations

__all__ = ["Answered", "Backpressure", "DataLost", "KeyConflict", "MemoryFull", "Recovering", "UnknownQuery"]


class Backpressure(RuntimeError):
    """The ingress backlog (or this client's share of it) is full. Recoverable: retry later."""


class KeyConflict(ValueError):
    """The client key was used before for a different question (HTTP 409)."""


class UnknownQuery(LookupError):
    """No such query for this client (HTTP 404)."""


class Answered(LookupError):
    """The query is answered: it has nothing left to cancel (HTTP 409). Its answer is read as
    any other's."""


class Recovering(UnknownQuery):
    """Not in Redis, which lost its data moments ago: a coordinator may be storing it again."""


class MemoryFull(Backpressure):
    """Redis has no room for this question's search beside those in flight (HTTP 503)."""

    retry_after_s = 10  # what a refused client is told to wait: memory frees as answers come


class DataLost(RuntimeError):
    """Redis lost its data moments ago: a client key not found waits while the coordinators store
    their questions again, client keys with them (HTTP 503). Recoverable: retry."""

    retry_after_s = 1  # coordinators store again what they hold within a lease round
