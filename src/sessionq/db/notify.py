"""The NOTIFY payloads sessionq sends, and their one decoder.

Every notification of sessionq's own channels carries one JSON object, encoded by one SQL function,
``sessionq.notify(channel, payload jsonb)`` (schema/00_base.sql), and decoded here. A
notification is delivered at the sender's commit; a rollback sends none. Its *key* names what
changed, so that a waiter subscribes to the one thing it waits for (`Listener.subscribe_key`).

- ``sessionq_session``, key ``session``: a Session row whose state, operation, generation or failed
  generation changed (20_sessions.sql). Payload ``{"session", "state", "operation", "generation",
  "row"}``; ``row`` (the whole row) only when no operation is pending and it fits NOTIFY's 8000
  bytes, so the waiter of a finished generation answers without reading. A deleted row:
  ``{"session", "gone": true}``.
- ``sessionq_task``, key ``session``: a task of the Session changed, or its dispatch failed
  (30_tasks.sql). Payload ``{"session"}``.
- ``sessionq_idle``, key ``session``: an idle boundary may be claimable (a settlement, a failed
  dispatch, a Resume, a finished checkpoint; 30_tasks.sql, 40_checkpoints.sql). Payload
  ``{"session"}``.
- ``sessionq_checkpoint``, key ``checkpoint``: a checkpoint row changed (40_checkpoints.sql).
  Payload ``{"checkpoint"}``.
- ``sessionq_event``, key ``session``: a lifecycle event of the Session was recorded (45_events.sql,
  record_event). Payload ``{"session"}``.
- ``sessionq_drain``, key ``worker``: a drain was requested (sessionq.request_drain,
  80_operator_views.sql). Payload ``{"worker"}``: a worker name or ``*`` (every worker).

- ``sessionq_agent``, key ``agent``: an Agent row was inserted, updated or deleted (10_agents.sql).
  Payload ``{"agent": "namespace/name"}``.

A notification sent by a traced statement (one the store made inside a sampled span: the
transaction-local setting ``sessionq.traceparent``) also carries ``"traceparent"``; the quiescence
workers take a settlement's for the suspend it wakes (docs/metrics.md).

procrastinate's own channels belong to the bridge (schema/05_procrastinate.sql) and are not
decoded here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Channel(StrEnum):
    SESSION = "sessionq_session"
    TASK = "sessionq_task"
    IDLE = "sessionq_idle"
    CHECKPOINT = "sessionq_checkpoint"
    DRAIN = "sessionq_drain"
    EVENT = "sessionq_event"
    AGENT = "sessionq_agent"


# the field of a channel's payload that names what changed; other channels (tests) use "key"
KEY_FIELDS: dict[str, str] = {
    Channel.SESSION: "session",
    Channel.TASK: "session",
    Channel.IDLE: "session",
    Channel.CHECKPOINT: "checkpoint",
    Channel.DRAIN: "worker",
    Channel.EVENT: "session",
    Channel.AGENT: "agent",
}
ALL_WORKERS = "*"  # the worker of a drain request that applies to every worker


class PayloadError(ValueError):
    """A payload that is not one of sessionq's (a JSON object with its channel's key)."""


def decode(channel: str, payload: str) -> dict[str, Any]:
    """The payload of a notification on `channel`, as a JSON object that holds its key field."""
    try:
        data = json.loads(payload)
    except ValueError:
        raise PayloadError(f"{channel}: the payload is not JSON") from None
    field = KEY_FIELDS.get(channel, "key")
    if not isinstance(data, dict) or not isinstance(data.get(field), str):
        raise PayloadError(f"{channel}: the payload has no {field!r}")
    return data


def key_of(channel: str, payload: str) -> str:
    """What a notification on `channel` is about (a Session id, a checkpoint id, a worker name)."""
    return str(decode(channel, payload)[KEY_FIELDS.get(channel, "key")])


@dataclass(frozen=True)
class SessionChange:
    """A ``sessionq_session`` notification."""

    session: str
    gone: bool = False
    state: str | None = None
    operation: str | None = None
    generation: str | None = None  # the operation UUID; None when the row has none
    row: dict[str, Any] | None = None  # the whole row, when no operation is pending and it fit


def session_change(payload: str) -> SessionChange:
    data = decode(Channel.SESSION, payload)
    row = data.get("row")
    return SessionChange(
        session=data["session"],
        gone=bool(data.get("gone")),
        state=data.get("state"),
        operation=data.get("operation"),
        generation=data.get("generation"),
        row=row if isinstance(row, dict) else None,
    )
