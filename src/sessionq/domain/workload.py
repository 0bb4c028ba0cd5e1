"""Workload credentials: how an Actor proves to the task store which Session it runs.

The credential is ``sqw.<session id>.<HMAC-SHA256(secret, session id)>``, with the secret kept in
``sessionq.secrets`` (shared by every process on the database). The gateway sends it to the Actor
with each turn (the A2A call's header ``x-sessionq-workload-token``, domain/turns.py); runtimes with
a per-Actor environment also get it at creation (``SESSIONQ_WORKLOAD_TOKEN``). Never to a user.
"""

from __future__ import annotations

import hashlib
import hmac
from uuid import UUID

ENV = "SESSIONQ_WORKLOAD_TOKEN"
PREFIX = "sqw."


def token_for(secret: str, session_id: UUID) -> str:
    mac = hmac.new(secret.encode(), str(session_id).encode(), hashlib.sha256).hexdigest()
    return f"{PREFIX}{session_id}.{mac}"


def verify(secret: str, token: str) -> UUID | None:
    """The Session a credential was issued for, or None when it is not a valid credential."""
    if not token.startswith(PREFIX):
        return None
    body = token[len(PREFIX) :]
    sid, _, _mac = body.rpartition(".")
    try:
        session_id = UUID(sid)
    except ValueError:
        return None
    if not hmac.compare_digest(token_for(secret, session_id).encode(), token.encode()):  # bytes: any text compares
        return None
    return session_id
