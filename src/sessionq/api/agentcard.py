"""A2A agent-card discovery over HTTP: ``GET /api/a2a/<namespace>/<agent>/.well-known/agent-card.json``.

Served on server.httpAddress beside the gRPC port (grpcio cannot share its port with HTTP/1.1).
Not found (missing Agent) answers 404, an authorization failure 403, a missing or unknown token
401. The card names the gRPC interface and the tenant to use with lf.a2a.v1.A2AService.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re

from a2a.types import a2a_pb2
from google.protobuf import json_format

from sessionq import errors
from sessionq.api.common import Authenticator, credential_headers
from sessionq.db.store import Store
from sessionq.errors import SessionqError

log = logging.getLogger("sessionq.api")

PATH = re.compile(r"^/api/a2a/([a-z0-9-]+)/([a-z0-9.-]+)/\.well-known/agent-card\.json$")
STATUS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
          405: "Method Not Allowed", 500: "Internal Server Error"}
HTTP_CODES = {"SQ401": 401, "SQ403": 403, "SQ404": 404, "SQ400": 400}


class AgentCardServer:
    def __init__(self, store: Store, auth: Authenticator, grpc_url: str) -> None:
        self.store = store
        self.auth = auth
        self.grpc_url = grpc_url
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self, address: str, *, reuse_port: bool = False) -> None:
        """Listen on address; reuse_port: share the port with the other API processes of one
        `serve` (SO_REUSEPORT)."""
        host, _, port = address.rpartition(":")
        self.server = await asyncio.start_server(self._handle, host, int(port), reuse_port=reuse_port or None)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await self.server.wait_closed()

    async def card(self, headers: list[tuple[str, str]], path: str) -> tuple[int, dict[str, object]]:
        m = PATH.match(path)
        if not m:
            return 404, {"error": "not found"}
        namespace, name = m.groups()
        try:
            who = self.auth.identify_headers(credential_headers(headers))
            self.auth.check_namespace(who, namespace)
            agent = await self.store.get_agent(namespace, name)
        except SessionqError as e:
            return HTTP_CODES.get(e.sqlstate, 500), {"error": errors.clip(e.message, errors.MAX_STATUS_MESSAGE)}
        card = a2a_pb2.AgentCard(
            name=agent.name,
            description=f"sessionq agent {agent.namespace}/{agent.name}",
            version=str(agent.desired_revision_id),
            supported_interfaces=[a2a_pb2.AgentInterface(url=self.grpc_url, protocol_binding="GRPC",
                                                         tenant=f"{agent.namespace}/{agent.name}")],
            capabilities=a2a_pb2.AgentCapabilities(streaming=False),
            default_input_modes=["text/plain"],
            default_output_modes=["text/plain"],
        )
        return 200, json_format.MessageToDict(card)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        status: int
        body: dict[str, object]
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
            lines = head.decode("latin-1").split("\r\n")
            method, path, _version = [*lines[0].split(" "), "", "", ""][:3]
            pairs = [(k.strip(), v.strip()) for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)]
            if method != "GET":
                status, body = 405, {"error": "only GET is supported"}
            else:
                status, body = await self.card(pairs, path.split("?", 1)[0])
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, UnicodeDecodeError):
            status, body = 400, {"error": "bad request"}
        except Exception:
            log.exception("agent card request failed")
            status, body = 500, {"error": "internal error; see the server log"}
        data = json.dumps(body).encode()
        writer.write(
            f"HTTP/1.1 {status} {STATUS.get(status, '')}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data
        )
        with contextlib.suppress(Exception):
            await writer.drain()
            writer.close()
