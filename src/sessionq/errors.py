"""One error vocabulary: SQLSTATE -> domain error -> gRPC status, in one table.

Stored procedures raise sessionq's own SQLSTATEs (class ``SQ``, see schema/00_base.sql). The
store turns a database error carrying one of them into `SessionqError`; servicers turn that into
the gRPC status of `GRPC_CODES`. Anything else that escapes is a server fault.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import grpc
import psycopg

# SQLSTATE -> (gRPC status code, name used in logs and metrics)
GRPC_CODES: dict[str, grpc.StatusCode] = {
    "SQ400": grpc.StatusCode.INVALID_ARGUMENT,
    "SQ403": grpc.StatusCode.PERMISSION_DENIED,
    "SQ404": grpc.StatusCode.NOT_FOUND,
    "SQ409": grpc.StatusCode.ABORTED,
    "SQ412": grpc.StatusCode.FAILED_PRECONDITION,
    "SQ422": grpc.StatusCode.ALREADY_EXISTS,
    "SQ503": grpc.StatusCode.UNAVAILABLE,
    # our own codes raised from Python
    "SQ401": grpc.StatusCode.UNAUTHENTICATED,
    "SQ504": grpc.StatusCode.DEADLINE_EXCEEDED,
    "SQ429": grpc.StatusCode.RESOURCE_EXHAUSTED,
}


class SessionqError(Exception):
    """A failure with a defined status: a client mistake, a conflict or a retryable condition."""

    def __init__(self, sqlstate: str, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.message = message
        self.reason = reason  # ErrorInfo reason, e.g. KAGENT_CHECKPOINT_SNAPSHOT_PENDING

    @property
    def code(self) -> grpc.StatusCode:
        return GRPC_CODES.get(self.sqlstate, grpc.StatusCode.INTERNAL)

    @property
    def metadata(self) -> dict[str, str]:
        """What the error's ErrorInfo carries besides its reason (REASON_METADATA)."""
        return REASON_METADATA.get(self.reason or "", {})

    def __repr__(self) -> str:
        return f"SessionqError({self.sqlstate!r}, {self.message!r}, reason={self.reason!r})"


# google.rpc.ErrorInfo domains: kagent's, and the A2A protocol's (the reasons the a2a-sdk clients map
# to their typed errors, a2a.utils.errors.A2A_ERROR_MAPPING)
KAGENT_DOMAIN = "kagent.dev"
A2A_DOMAIN = "a2a-protocol.org"
A2A_REASONS = frozenset({
    "TASK_NOT_FOUND", "TASK_NOT_CANCELABLE", "PUSH_NOTIFICATION_NOT_SUPPORTED", "UNSUPPORTED_OPERATION",
    "CONTENT_TYPE_NOT_SUPPORTED", "INVALID_AGENT_RESPONSE", "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
    "EXTENSION_SUPPORT_REQUIRED", "VERSION_NOT_SUPPORTED", "INVALID_PARAMS", "INVALID_REQUEST", "METHOD_NOT_FOUND",
})
A2A_METHOD_PREFIX = "/lf.a2a.v1.A2AService/"


# A message refused because its Session's turn is still running (busy policy reject): kagent's reason,
# and its hint of when to send again. A message queued past sessions.maxQueuedTurns: its reason.
SEND_NOT_ACCEPTED = "KAGENT_SEND_NOT_ACCEPTED"
SEND_RETRY_AFTER_MS = 100
TURN_QUEUE_FULL = "KAGENT_TURN_QUEUE_FULL"
# the ErrorInfo metadata of a reason (gRPC's ErrorInfo.metadata; the HTTP bindings' error data)
REASON_METADATA: dict[str, dict[str, str]] = {SEND_NOT_ACCEPTED: {"retryAfterMs": str(SEND_RETRY_AFTER_MS)}}


def error_domain(reason: str) -> str:
    """The ErrorInfo domain of a reason: the A2A protocol's for its own reasons, else kagent's."""
    return A2A_DOMAIN if reason in A2A_REASONS else KAGENT_DOMAIN


# how much of a client's value an error message may quote, and how long a status message may be
CLIP = 80
MAX_STATUS_MESSAGE = 1000


def clip(value: object, limit: int = CLIP) -> str:
    """A value to quote in a message for a person: at most `limit` characters, a cut marked with an
    ellipsis. Every message that echoes a client's value goes through this (never echo a huge value
    back: a status message travels in a header, and clients refuse large ones). schema/00_base.sql
    has the same helper for the stored procedures' messages (sessionq.clip)."""
    text = str(value)
    return text if len(text) <= limit else text[:limit] + "\u2026"


def invalid(message: str) -> SessionqError:
    return SessionqError("SQ400", message)


def not_found(message: str) -> SessionqError:
    return SessionqError("SQ404", message)


def conflict(message: str) -> SessionqError:
    return SessionqError("SQ409", message)


def precondition(message: str, reason: str | None = None) -> SessionqError:
    return SessionqError("SQ412", message, reason)


def unavailable(message: str) -> SessionqError:
    return SessionqError("SQ503", message)


def unauthenticated(message: str) -> SessionqError:
    return SessionqError("SQ401", message)


def permission_denied(message: str) -> SessionqError:
    return SessionqError("SQ403", message)


def from_database(error: psycopg.Error) -> SessionqError | None:
    """The domain error a procedure raised, or None when the error is not one of ours."""
    state = error.sqlstate or ""
    if state.startswith("SQ") and state in GRPC_CODES:
        diag = error.diag
        return SessionqError(state, diag.message_primary or str(error), diag.message_hint)
    return None


@contextlib.contextmanager
def database_errors() -> Iterator[None]:
    """Raise a database error of ours (a procedure's SQLSTATE) as its domain error, with no
    database traceback; any other error as it is."""
    try:
        yield
    except psycopg.Error as e:
        domain = from_database(e)
        if domain is not None:
            raise domain from None
        raise
