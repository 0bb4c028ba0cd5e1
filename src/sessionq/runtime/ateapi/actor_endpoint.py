"""Actors' private A2A endpoints for a served runtime: one path per Actor,
``POST /actors/{atespace}/{name}`` (A2A JSON-RPC, method ``SendMessage``), answered when the turn
ended, and ``CancelTask`` (the runtime's `cancel_turn`: the turn stops without further task
writes). The runtime's `invoke` plays the turn; the Actor's UID the caller expects comes with the
message, the Session's workload credential with the call (header ``x-sessionq-workload-token``,
see invoke.py), which the simulated Actor uses in preference to one of its environment. The
address pattern that reaches them is ``http://HOST:PORT/actors/{atespace}/{name}`` (the adapter
percent-encodes both; the name is the rest of the decoded path, so a name with a "/" or a control
character reaches the runtime, which refuses it).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, cast

from a2a.types import a2a_pb2
from google.protobuf import json_format
from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from sessionq.runtime.ateapi.invoke import from_cancel_request, from_send_request, jsonrpc_error
from sessionq.runtime.base import WORKLOAD_TOKEN_HEADER, Code, Substrate, SubstrateError
from sessionq.webserve import HttpServer, Limits, connection_cap

log = logging.getLogger(__name__)


def build_app(runtime: Substrate) -> Starlette:
    async def send(request: Request) -> JSONResponse:
        atespace, name = request.path_params["atespace"], request.path_params["name"]
        request_id: Any = None
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise SubstrateError(Code.INVALID_ARGUMENT, "not a JSON-RPC request")
            request_id = body.get("id")
            if body.get("method") == "CancelTask":
                return await cancel(atespace, name, request_id, body.get("params") or {},
                                    request.headers.get(WORKLOAD_TOKEN_HEADER))
            if body.get("method") != "SendMessage":
                raise SubstrateError(Code.UNIMPLEMENTED, f"method {body.get('method')!r} is not served here")
            send_request = a2a_pb2.SendMessageRequest()
            json_format.ParseDict(body.get("params") or {}, send_request, ignore_unknown_fields=True)
            uid, invoke = from_send_request(send_request, request.headers.get(WORKLOAD_TOKEN_HEADER))
            await runtime.invoke(atespace, name, cast(str, uid or None), invoke)
        except SubstrateError as e:
            return JSONResponse(jsonrpc_error(request_id, e))
        except (ValueError, json_format.ParseError) as e:
            return JSONResponse(jsonrpc_error(request_id, SubstrateError(Code.INVALID_ARGUMENT, str(e))))
        except Exception as e:
            log.exception("turn of actor %s/%s failed", atespace, name)
            return JSONResponse(jsonrpc_error(request_id, SubstrateError(Code.INTERNAL, type(e).__name__)))
        reply = a2a_pb2.SendMessageResponse(message=a2a_pb2.Message(
            message_id=f"done-{invoke.dispatch_id}", role=a2a_pb2.ROLE_AGENT,
            parts=[a2a_pb2.Part(text="turn ended")],
        ))
        return JSONResponse({"jsonrpc": "2.0", "id": request_id, "result": json_format.MessageToDict(reply)})

    async def cancel(
        atespace: str, name: str, request_id: Any, params: dict[str, Any], credential: str | None
    ) -> JSONResponse:
        cancel_request = a2a_pb2.CancelTaskRequest()
        json_format.ParseDict(params, cancel_request, ignore_unknown_fields=True)
        uid, session_id, task_id = from_cancel_request(cancel_request)
        cancel_turn = getattr(runtime, "cancel_turn", None)  # a runtime without it cannot stop a turn
        if cancel_turn is None:
            raise SubstrateError(Code.UNIMPLEMENTED, "this runtime cannot cancel a turn")
        await cancel_turn(atespace, name, cast(str, uid or None), session_id, task_id, credential=credential or None)
        task = a2a_pb2.Task(id=task_id, context_id=session_id,
                            status=a2a_pb2.TaskStatus(state=a2a_pb2.TASK_STATE_CANCELED))
        return JSONResponse({"jsonrpc": "2.0", "id": request_id, "result": json_format.MessageToDict(task)})

    # the name takes the rest of the (decoded) path: a "/" or a control character the caller
    # percent-encoded in a name reaches the runtime, which refuses it (INVALID_ARGUMENT), rather
    # than missing the route
    return Starlette(routes=[Route(f"/actors/{{atespace}}/{{name:{_REST}}}", send, methods=["POST"])])


class _RestConvertor(Convertor[str]):
    """The rest of a path, any characters (Starlette's `path` stops at a newline)."""

    regex = "(?s:.*)"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


_REST = "sessionq_rest"
register_url_convertor(_REST, _RestConvertor())


# the endpoints' listener: the HTTP frame of sessionq's other listeners (connection cap, deadlines)
LIMITS = Limits(name="actor endpoints", max_connections=1000, header_timeout=15.0)


class ActorEndpoints:
    """The A2A endpoints on `address` (port 0: any; see `port`)."""

    def __init__(self, runtime: Substrate) -> None:
        self.host = "127.0.0.1"
        limits = replace(LIMITS, max_connections=connection_cap(LIMITS.max_connections))
        self._http = HttpServer(build_app(runtime), limits)

    @property
    def port(self) -> int | None:
        return self._http.port or None

    @property
    def pattern(self) -> str:
        return f"http://{self.host}:{self.port}/actors/{{atespace}}/{{name}}"

    async def start(self, address: str) -> None:
        host, _, _ = address.rpartition(":")
        self.host = host.strip("[]") or "127.0.0.1"
        await self._http.start(address)

    async def stop(self) -> None:
        await self._http.stop()
