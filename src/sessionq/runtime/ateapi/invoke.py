"""`invoke` over A2A: the gateway dials the Actor's private A2A endpoint (a2a-sdk JSON-RPC client).

The Actor's address comes from the pattern ``runtime.substrate.actorAddressPattern`` with the
placeholders ``{worker_ip}``, ``{worker}``, ``{atespace}``, ``{name}`` and ``{uid}`` (a real
Substrate: ``http://{worker_ip}:80``; the served simulator: one path per Actor on its A2A port).
The message goes as an A2A `SendMessage` (role user, context id the Session, the continued task's
id), with what sessionq's task store needs to attribute the turn in the request's metadata: the
keys ``sessionq.dev/session-id`` and ``sessionq.dev/dispatch-id`` (what `sessionq.agentkit` reads)
and ``sessionq`` (sessionId, dispatchId, taskId, actorUid: what the served simulator reads). The
Session's workload credential travels as the HTTP header ``x-sessionq-workload-token`` of the call
over the private route (a real Substrate has no per-Actor environment to hand it over at creation);
it is never put in the message, in a log line or in an error; a ``CancelTask`` carries it too.
Every call sends ``A2A-Version: 1.0`` (the SDK's handlers refuse a call without it). The call
returns when the Actor answers, i.e. when the turn ended (the Actor reports the task through the
task store API itself).

Errors: a connection or timeout failure is UNAVAILABLE (uncertain: the turn may have started); a
JSON-RPC error whose message starts with a status name (``FAILED_PRECONDITION: ...``, what the
simulator's endpoint sends) maps to that code; any other error is INTERNAL with its text.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
from a2a.client import ClientCallContext, minimal_agent_card
from a2a.client.errors import A2AClientError, A2AClientTimeoutError
from a2a.client.transports.jsonrpc import JsonRpcTransport
from a2a.types import a2a_pb2
from a2a.utils.constants import PROTOCOL_VERSION_CURRENT, VERSION_HEADER
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError
from google.protobuf import json_format

from sessionq import telemetry
from sessionq.runtime.base import (
    INVOKE_DISPATCH_KEY,
    INVOKE_SESSION_KEY,
    WORKLOAD_TOKEN_HEADER,
    Actor,
    Code,
    InvokeRequest,
    SubstrateError,
)

METADATA_KEY = "sessionq"


def call_context(credential: str | None) -> ClientCallContext | None:
    """The A2A call's context: the workload credential as an HTTP header of the call, and the W3C
    traceparent of a traced turn."""
    headers = dict(telemetry.with_traceparent([]))  # the turn's trace context, when it is traced
    if credential:
        headers[WORKLOAD_TOKEN_HEADER] = credential
    return ClientCallContext(service_parameters=headers) if headers else None


def to_send_request(uid: str, request: InvokeRequest) -> a2a_pb2.SendMessageRequest:
    message = a2a_pb2.Message()
    json_format.ParseDict(request.message, message, ignore_unknown_fields=True)
    message.role = a2a_pb2.ROLE_USER
    if not message.message_id:
        message.message_id = f"turn-{request.dispatch_id}"
    if not message.context_id:
        message.context_id = request.session_id
    if request.task_id is not None:
        message.task_id = request.task_id
    send = a2a_pb2.SendMessageRequest(message=message)
    send.metadata.update({INVOKE_SESSION_KEY: request.session_id, INVOKE_DISPATCH_KEY: request.dispatch_id})
    send.metadata.update({METADATA_KEY: {
        "sessionId": request.session_id,
        "dispatchId": request.dispatch_id,
        "taskId": request.task_id or "",
        "actorUid": uid,
    }})
    return send


def to_cancel_request(uid: str, session_id: str, task_id: str) -> a2a_pb2.CancelTaskRequest:
    cancel = a2a_pb2.CancelTaskRequest(id=task_id)
    cancel.metadata.update({INVOKE_SESSION_KEY: session_id})  # what sessionq.agentkit reads
    cancel.metadata.update({METADATA_KEY: {"sessionId": session_id, "actorUid": uid}})
    return cancel


def from_cancel_request(cancel: a2a_pb2.CancelTaskRequest) -> tuple[str, str, str]:
    """(expected actor UID, session id, task id) of a CancelTask made by `to_cancel_request`."""
    meta = json_format.MessageToDict(cancel.metadata).get(METADATA_KEY)
    if not cancel.id or not isinstance(meta, dict) or not meta.get("sessionId"):
        raise SubstrateError(Code.INVALID_ARGUMENT, f"CancelTask without id or metadata.{METADATA_KEY}.sessionId")
    return str(meta.get("actorUid") or ""), str(meta["sessionId"]), cancel.id


def from_send_request(
    send: a2a_pb2.SendMessageRequest, credential: str | None = None
) -> tuple[str, InvokeRequest]:
    """(expected actor UID, the InvokeRequest) of a SendMessage made by `to_send_request`, with the
    credential its call carried."""
    meta = json_format.MessageToDict(send.metadata).get(METADATA_KEY)
    if not isinstance(meta, dict) or not meta.get("sessionId") or not meta.get("dispatchId"):
        raise SubstrateError(Code.INVALID_ARGUMENT,
                             f"SendMessage without metadata.{METADATA_KEY} (sessionId, dispatchId)")
    message = json_format.MessageToDict(send.message)
    return str(meta.get("actorUid") or ""), InvokeRequest(
        session_id=str(meta["sessionId"]),
        dispatch_id=str(meta["dispatchId"]),
        message=message,
        task_id=str(meta["taskId"]) if meta.get("taskId") else None,
        credential=credential or None,
    )


def _path_segment(value: str) -> str:
    """`value` as one URL path segment: every reserved character percent-encoded, "." as well (a
    client normalizes "." and ".." segments away)."""
    return quote(value, safe="").replace(".", "%2E")


def _code_of(text: str) -> Code:
    head = text.split(":", 1)[0].strip()
    return Code.__members__.get(head, Code.INTERNAL)


class A2AInvoker:
    """Sends one turn to an Actor's A2A endpoint and waits for its answer."""

    def __init__(
        self, pattern: str, *, timeout: float | None = None, connect_timeout: float = 5.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """`transport`: httpx's (None: the network; tests pass an app's)."""
        self.pattern = pattern
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.transport = transport
        self._http: httpx.AsyncClient | None = None

    async def open(self) -> None:
        # every call names the A2A version it speaks (the SDK's handlers take a call without one
        # for 0.3, and refuse it), as the SDK's own client factory does
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout, connect=self.connect_timeout),
                                       headers={VERSION_HEADER: PROTOCOL_VERSION_CURRENT}, transport=self.transport)

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    def address(self, atespace: str, name: str, uid: str, actor: Actor | None) -> str:
        """The Actor's URL. The atespace and name go into it percent-encoded, dots too, so that a
        name the runtime refuses ("a/b", "..", one with a NUL) reaches it as it is, and is refused
        there (INVALID_ARGUMENT) rather than missing the endpoint's path; an empty one cannot be
        addressed (INVALID_ARGUMENT here, as the server frame answers an empty name)."""
        if not atespace or not name:
            raise SubstrateError(Code.INVALID_ARGUMENT, "actor: atespace and name are required")
        worker_ip = actor.worker_ip or "" if actor is not None else ""
        worker = actor.worker or "" if actor is not None else ""
        return self.pattern.format(worker_ip=worker_ip, worker=worker, atespace=_path_segment(atespace),
                                   name=_path_segment(name), uid=uid)

    def needs_actor(self) -> bool:
        """Whether the address depends on where the Actor runs (then the caller reads it first)."""
        return "{worker_ip}" in self.pattern or "{worker}" in self.pattern

    async def invoke(
        self, atespace: str, name: str, uid: str, request: InvokeRequest, actor: Actor | None = None
    ) -> None:
        """Send the turn; `actor` (read by the caller when `needs_actor`) gives the address."""
        if self._http is None:
            raise SubstrateError(Code.UNAVAILABLE, "the A2A client is not open")
        if self.needs_actor() and (actor is None or not actor.worker_ip):
            state = actor.state.value if actor is not None else "unknown"
            raise SubstrateError(Code.FAILED_PRECONDITION, f"actor {atespace}/{name} is not running ({state})")
        url = self.address(atespace, name, uid, actor)
        send, context = to_send_request(uid, request), call_context(request.credential)
        await self._call(atespace, name, url, lambda t: t.send_message(send, context=context))

    async def cancel(
        self, atespace: str, name: str, uid: str, session_id: str, task_id: str, actor: Actor | None = None,
        *, credential: str | None = None,
    ) -> None:
        """A2A CancelTask of `task_id` to the Actor's endpoint: it stops the turn without further task
        writes. An Actor that is not running has no turn to stop: nothing to do. The Session's
        workload `credential` goes with the call as with a turn's (header x-sessionq-workload-token):
        an Actor that had no turn in its process yet reads the task with it."""
        if self._http is None:
            raise SubstrateError(Code.UNAVAILABLE, "the A2A client is not open")
        if self.needs_actor() and (actor is None or not actor.worker_ip):
            return
        url = self.address(atespace, name, uid, actor)
        cancel, context = to_cancel_request(uid, session_id, task_id), call_context(credential)
        await self._call(atespace, name, url, lambda t: t.cancel_task(cancel, context=context), nothing_to_stop=True)

    async def _call(self, atespace: str, name: str, url: str, send: Any, *, nothing_to_stop: bool = False) -> None:
        """`nothing_to_stop`: an Actor answering TaskNotFound or TaskNotCancelable (a CancelTask of a
        turn it does not run, or one already ended) is a success."""
        assert self._http is not None
        transport = JsonRpcTransport(self._http, minimal_agent_card(url, ["JSONRPC"]), url, is_shared_httpx=True)
        try:
            await send(transport)
        except (TaskNotFoundError, TaskNotCancelableError) as e:
            if nothing_to_stop:
                return
            code = Code.NOT_FOUND if isinstance(e, TaskNotFoundError) else Code.FAILED_PRECONDITION
            raise SubstrateError(code, f"actor {atespace}/{name}: {e}") from None
        except A2AClientTimeoutError as e:
            raise SubstrateError(Code.DEADLINE_EXCEEDED, f"actor {atespace}/{name}: {e}") from None
        except A2AClientError as e:
            text = str(e)
            if "Network communication error" in text or text.startswith("HTTP Error 5"):
                raise SubstrateError(Code.UNAVAILABLE, f"actor {atespace}/{name}: {text}") from None
            detail = text.split(": ", 1)[1] if text.startswith("JSON-RPC Error") else text
            raise SubstrateError(_code_of(detail), detail) from None
        except Exception as e:  # an A2A error type of the SDK's own mapping
            detail = str(e)
            raise SubstrateError(_code_of(detail), detail or type(e).__name__) from None


def jsonrpc_error(request_id: Any, error: SubstrateError) -> dict[str, Any]:
    """The JSON-RPC error an endpoint answers for a failed turn (the code leads the message)."""
    return {"jsonrpc": "2.0", "id": request_id,
            "error": {"code": -32000, "message": f"{error.code.value}: {error.message}"}}
