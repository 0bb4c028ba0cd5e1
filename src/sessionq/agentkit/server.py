"""Serve an a2a-sdk `AgentExecutor` as a sessionq Actor.

`run(executor)` is the one line an agent author changes: where an a2a-sdk agent builds its request
handler with an in-memory task store and runs uvicorn, it calls ``sessionq.agentkit.run(executor,
card)`` instead. Under sessionq it then

- serves A2A (JSON-RPC over HTTP, and the agent card) on the Actor's private endpoint: the
  listening socket the runtime hands over (SESSIONQ_A2A_FD), or SESSIONQ_A2A_PORT on 127.0.0.1;
- keeps its tasks in sessionq through kagent's TaskStoreService (SESSIONQ_TASKSTORE_ADDRESS) with
  its workload credential and each turn's dispatch id. The credential comes with each request, as
  the HTTP header x-sessionq-workload-token the gateway sends over the private route (how a real
  Substrate's Actor gets it: its environment is the template's); SESSIONQ_WORKLOAD_TOKEN, when a
  runtime sets it at creation, serves until a request brings one. The header is taken out of the
  request headers the agent's code sees, and never logged;
- answers the runtime's readiness probe, ``GET /readyz`` on a private endpoint of its own
  (SESSIONQ_READY_FD or SESSIONQ_READY_PORT; readiness.py): 200 once it serves A2A;
- settles the task when the SDK's execution of the request stops: a terminal state, or a wait for
  input or authorization. The update that reaches that state settles it in the same write (the task
  store's UpdateTask with the settle header); a turn that ends otherwise (an error) is settled at the
  last version it wrote (SettleTask). An agent that answers with a bare Message gets a COMPLETED
  task holding it.

Stopped with SIGTERM (the runtime suspends it), it finishes what it serves and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
import warnings
from collections.abc import AsyncGenerator
from typing import Any

import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.agent_execution.active_task import ActiveTask
from a2a.server.cluster.version import TaskVersion
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.server.tasks import TaskUpdater
from a2a.types import a2a_pb2
from google.protobuf.timestamp_pb2 import Timestamp
from starlette.applications import Starlette

from sessionq.agentkit.readiness import Readiness, env_listener, listening_socket
from sessionq.agentkit.taskstore import (
    DISPATCH_STATE,
    NEW_TASK_STATE,
    SESSION_STATE,
    SETTLE_STATE,
    SETTLING_STATES,
    TOKEN_STATE,
    KagentTaskStore,
)
from sessionq.runtime.base import WORKLOAD_TOKEN_HEADER
from sessionq.runtime.taskstore_client import TRACEPARENT, TaskStoreClient

log = logging.getLogger(__name__)

__all__ = [
    "A2A_FD_ENV",
    "A2A_PORT_ENV",
    "DATA_DIR_ENV",
    "TASKSTORE_ENV",
    "WORKLOAD_TOKEN_ENV",
    "CredentialContextBuilder",
    "SettlingRequestHandler",
    "build_app",
    "data_dir",
    "default_card",
    "run",
    "serve",
]

# what the runtime gives an Actor's process (sessionq.runtime.process sets them)
WORKLOAD_TOKEN_ENV = "SESSIONQ_WORKLOAD_TOKEN"
TASKSTORE_ENV = "SESSIONQ_TASKSTORE_ADDRESS"
DATA_DIR_ENV = "SESSIONQ_DATA_DIR"
A2A_FD_ENV = "SESSIONQ_A2A_FD"
A2A_PORT_ENV = "SESSIONQ_A2A_PORT"
ACTOR_ENV = "SESSIONQ_ACTOR"

_WRITTEN = "sessionq.dev/tasks-written"


def data_dir() -> str:
    """The Actor's durable directory (what survives suspend, resume, checkpoints and forks)."""
    return os.environ.get(DATA_DIR_ENV) or os.getcwd()


async def start_turn(context: RequestContext, event_queue: EventQueue) -> TaskUpdater:
    """The turn's TaskUpdater, its task WORKING: a new task is created WORKING with the user's
    message (one write to the task store), a continued one (input-required, auth-required) moves to
    WORKING. An executor's first line: `updater = await agentkit.start_turn(context, event_queue)`."""
    updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
    if context.current_task is None and context.message is not None:
        await event_queue.enqueue_event(
            a2a_pb2.Task(
                id=context.task_id,
                context_id=context.context_id,
                status=a2a_pb2.TaskStatus(state=a2a_pb2.TASK_STATE_WORKING),
                history=[context.message],
            )
        )
    else:
        await updater.start_work()
    return updater


def _now() -> Timestamp:
    ts = Timestamp()
    ts.GetCurrentTime()
    return ts


CANCEL_SETTLE_SECONDS = 5.0  # under the runtime's CancelTask timeout (10 s)


async def _settled(producer: asyncio.Task[None] | None, task_id: str) -> None:
    """Wait (bounded) for a cancelled turn's producer, i.e. the executor's `execute`, to end."""
    if producer is None or producer.done() or not producer.cancelling():
        return  # no turn, or not one this cancel stopped
    done, _ = await asyncio.wait({producer}, timeout=CANCEL_SETTLE_SECONDS)
    if not done:
        log.warning(
            "task %s: the executor's execute did not end within %.0f s of its cancel", task_id, CANCEL_SETTLE_SECONDS
        )


async def _close_queues(task: ActiveTask) -> None:
    """Close the event queues of an SDK task whose start failed: the a2a-sdk (1.3) leaves their loops
    running, two tasks held for the life of the process per refused request."""
    await task._event_queue_agent.close(immediate=True)
    await task._event_queue_subscribers.close(immediate=True)


class SettlingRequestHandler(DefaultRequestHandler):
    """The SDK's request handler over a `KagentTaskStore`, settling each turn when it stops."""

    def __init__(self, executor: AgentExecutor, store: KagentTaskStore, card: a2a_pb2.AgentCard) -> None:
        with warnings.catch_warnings():
            # one Actor serves its Session alone: no cross-replica event stream is needed
            warnings.simplefilter("ignore")
            logging.getLogger("a2a.server.request_handlers.default_request_handler_v2").disabled = True
            super().__init__(agent_executor=executor, task_store=store, agent_card=card)
            logging.getLogger("a2a.server.request_handlers.default_request_handler_v2").disabled = False
        self.store = store
        self._closing: set[asyncio.Task[None]] = set()
        registry = self._active_task_registry
        forward = registry._on_active_task_cleanup

        def cleanup(task: ActiveTask) -> None:
            forward(task)
            if task._producer_task is None:  # its start failed (a refused credential, an unknown task)
                closing = asyncio.create_task(_close_queues(task))
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)

        registry._on_active_task_cleanup = cleanup  # type: ignore[method-assign,assignment]

    @staticmethod
    def _bind(params: a2a_pb2.SendMessageRequest | a2a_pb2.CancelTaskRequest, context: ServerCallContext) -> None:
        for key in (SESSION_STATE, DISPATCH_STATE):
            value = params.metadata.fields.get(key)
            if value is not None and value.string_value:
                context.state[key] = value.string_value
        if isinstance(params, a2a_pb2.SendMessageRequest):
            context.state[SETTLE_STATE] = True  # the update that ends this turn settles it (one write)
            if not params.message.task_id:
                context.state[NEW_TASK_STATE] = True  # the task store knows the new task is not stored yet

    async def _settle_written(self, context: ServerCallContext) -> None:
        for task_id in list(context.state.get(_WRITTEN) or ()):
            known = self.store.versions.get(task_id)
            if known is not None and known[1] in SETTLING_STATES:
                await self.store.settle(context, task_id)

    async def _record_message(
        self, params: a2a_pb2.SendMessageRequest, answer: a2a_pb2.Message, context: ServerCallContext
    ) -> None:
        """A bare Message answer: kept as a COMPLETED task (sessionq's turns are tasks), settled."""
        user = a2a_pb2.Message()
        user.CopyFrom(params.message)
        task_id = user.task_id or str(uuid.uuid4())
        context_id = user.context_id or context.state.get(SESSION_STATE) or str(uuid.uuid4())
        user.task_id, user.context_id = task_id, context_id
        reply = a2a_pb2.Message()
        reply.CopyFrom(answer)
        reply.task_id, reply.context_id = task_id, context_id
        # as any turn: the task WORKING first, then its final state (staged until it is settled)
        task = a2a_pb2.Task(
            id=task_id,
            context_id=context_id,
            status=a2a_pb2.TaskStatus(state=a2a_pb2.TASK_STATE_WORKING, timestamp=_now()),
            history=[user],
        )
        version = await self.store.save(
            task, event=None, prev=None, prev_version=TaskVersion.MISSING, context=context
        )
        task.status.CopyFrom(a2a_pb2.TaskStatus(state=a2a_pb2.TASK_STATE_COMPLETED, message=reply, timestamp=_now()))
        task.history.append(reply)
        event = a2a_pb2.TaskStatusUpdateEvent(task_id=task_id, context_id=context_id, status=task.status)
        await self.store.save(task, event=event, prev=None, prev_version=version, context=context)
        await self.store.settle(context, task_id)

    async def on_message_send(
        self, params: a2a_pb2.SendMessageRequest, context: ServerCallContext
    ) -> a2a_pb2.Message | a2a_pb2.Task:
        self._bind(params, context)
        context.state.setdefault(_WRITTEN, set())
        try:
            result = await super().on_message_send(params, context)
        except BaseException:
            await self._settle_written(context)
            raise
        if isinstance(result, a2a_pb2.Message):
            await self._record_message(params, result, context)
        else:
            await self._settle_written(context)
        return result

    async def on_cancel_task(
        self, params: a2a_pb2.CancelTaskRequest, context: ServerCallContext
    ) -> a2a_pb2.Task | None:
        """A2A CancelTask from the runtime (sessionq's cancel_turn). sessionq publishes the task
        CANCELED and ends the turn before it tells the Actor (so that nothing the Actor still
        writes is accepted), and the SDK refuses to cancel a task it reads in a terminal state:
        here a task this Actor is still running is cancelled locally all the same, i.e. the
        executor's `cancel` is called and its `execute` cancelled. Their writes to the task are
        refused by the task store (the task has ended) and ignored.

        The answer comes once the executor's `execute` has ended (bounded by
        CANCEL_SETTLE_SECONDS): sessionq suspends the Actor (stops its process) once it was told,
        so whatever the executor does on its way out (its `except CancelledError`, `finally`)
        runs before that, not racing the stop."""
        self._bind(params, context)
        stored = await self._versioned_store.get(params.id, context)
        active = await self._active_task_registry.get(params.id)
        producer: asyncio.Task[None] | None = getattr(active, "_producer_task", None)
        try:
            if stored is not None and stored.task.status.state == a2a_pb2.TASK_STATE_CANCELED and active is not None:
                try:
                    await self._cancel_local(params.id, context)
                except Exception as exc:  # the executor's writes to the ended task are refused
                    log.debug("task %s: the local cancel ended with %s", params.id, exc)
                return stored.task
            return await super().on_cancel_task(params, context)
        finally:
            await _settled(producer, params.id)

    async def on_message_send_stream(
        self, params: a2a_pb2.SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Any, None]:
        self._bind(params, context)
        context.state.setdefault(_WRITTEN, set())
        try:
            async for event in super().on_message_send_stream(params, context):
                yield event
        finally:
            await self._settle_written(context)


class Credential(str):
    """A workload credential: its value where it is sent, hidden in any repr (the SDK logs call
    contexts at DEBUG level)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "'<workload credential>'"


class CredentialContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's call context, with the workload credential header moved out of the request headers
    (what an agent's code may look at) into the state key the task store reads (as a `Credential`,
    which no log line shows); a traced turn's W3C traceparent goes with the task store's calls."""

    def build(self, request: Any) -> ServerCallContext:
        context = super().build(request)
        headers = context.state.get("headers")
        if isinstance(headers, dict):
            token = headers.pop(WORKLOAD_TOKEN_HEADER, None)
            if token:
                context.state[TOKEN_STATE] = Credential(token.strip())
            traceparent = headers.get("traceparent")
            if isinstance(traceparent, str) and len(traceparent) == 55:
                TRACEPARENT.set(traceparent)  # a traced turn: its reports to the task store join the trace
        return context


class _TrackingStore(KagentTaskStore):
    """Records, in the call context, the tasks each request wrote (what its turn settles)."""

    async def save(
        self, task: a2a_pb2.Task, *, event: Any, prev: Any, prev_version: Any, context: ServerCallContext
    ) -> Any:
        version = await super().save(task, event=event, prev=prev, prev_version=prev_version, context=context)
        written = context.state.get(_WRITTEN)
        if isinstance(written, set):
            written.add(task.id)
        return version


def default_card(url: str, name: str | None = None, description: str = "An agent run by sessionq") -> a2a_pb2.AgentCard:
    return a2a_pb2.AgentCard(
        name=name or os.environ.get(ACTOR_ENV, "agent").rsplit("/", 1)[-1],
        description=description,
        version="1.0.0",
        supported_interfaces=[a2a_pb2.AgentInterface(protocol_binding="JSONRPC", url=url, protocol_version="1.0")],
        capabilities=a2a_pb2.AgentCapabilities(streaming=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[a2a_pb2.AgentSkill(id="chat", name="chat", description=description, tags=["chat"])],
    )


def _listening_socket() -> socket.socket:
    sock = env_listener(A2A_FD_ENV, A2A_PORT_ENV, default_port=0, backlog=128)
    assert sock is not None  # a default port is given
    return sock


class _PromptServer(uvicorn.Server):
    """uvicorn's server, stopping at once: the runtime stops an Actor's process at every suspend,
    and uvicorn notices a signal at its next 0.1 s tick and then sleeps another 0.1 s before it
    waits (polling every 0.1 s) for open connections. Here the signal wakes the server at once and
    the wait polls every 5 ms; what is waited for is the same (in-flight requests finish)."""

    POLL = 0.005

    def __init__(self, config: uvicorn.Config, readiness: Readiness | None = None) -> None:
        super().__init__(config)
        self._exit = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.readiness = readiness or Readiness()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:  # listening: /readyz says ready from now on
            self.readiness.mark_ready()

    def handle_exit(self, sig: int, frame: Any) -> None:
        self.readiness.mark_stopping()
        super().handle_exit(sig, frame)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._exit.set)

    async def main_loop(self) -> None:
        self._loop = asyncio.get_running_loop()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 1) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exit.wait(), 0.1)
            should_exit = await self.on_tick(counter)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        limit = self.config.timeout_graceful_shutdown
        deadline = None if limit is None else asyncio.get_running_loop().time() + limit
        while (self.server_state.connections or self.server_state.tasks) and not self.force_exit:
            if deadline is not None and asyncio.get_running_loop().time() > deadline:
                for t in self.server_state.tasks:
                    t.cancel(msg="Task cancelled, timeout graceful shutdown exceeded")
                break
            await asyncio.sleep(self.POLL)
        for server in self.servers:
            await server.wait_closed()
        if not self.force_exit:
            await self.lifespan.shutdown()


def _required(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise SystemExit(f"sessionq.agentkit: {name} is not set; run this agent under a sessionq runtime"
                         " (a Substrate's ActorTemplate sets it in the container's environment)")
    return value


def build_app(executor: AgentExecutor, card: a2a_pb2.AgentCard, client: TaskStoreClient,
              token: str | None = None) -> Starlette:
    """The Actor's A2A app: the agent card and JSON-RPC at ``/``, its tasks kept through `client`
    with each request's workload credential (`token`: the environment's, until a request brings one)."""
    handler = SettlingRequestHandler(executor, _TrackingStore(client, token), card)
    rpc = create_jsonrpc_routes(handler, "/", context_builder=CredentialContextBuilder())
    app = Starlette(routes=[*create_agent_card_routes(card), *rpc])
    app.state.request_handler = handler  # `await app.state.request_handler.aclose()` ends its tasks
    return app


async def serve(executor: AgentExecutor, card: a2a_pb2.AgentCard | None = None) -> None:
    """Serve `executor` until SIGTERM (see the module docstring)."""
    token = os.environ.get(WORKLOAD_TOKEN_ENV) or None  # else each request brings it
    client = TaskStoreClient(_required(TASKSTORE_ENV), token)
    sock = _listening_socket()
    host, port = sock.getsockname()[:2]
    url = f"http://{host}:{port}/"
    if card is None:
        card = default_card(url)
    app = build_app(executor, card, client, token)
    readiness = Readiness()
    await readiness.start(listening_socket())  # the runtime's /readyz (readiness.py): 503 until serving
    server = _PromptServer(uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False), readiness)
    try:
        await server.serve(sockets=[sock])
    finally:
        await app.state.request_handler.aclose()  # the SDK's tasks end here, not as garbage at exit
        await readiness.close()
        await client.close()


def run(executor: AgentExecutor, card: a2a_pb2.AgentCard | None = None) -> None:
    """Run `executor` as a sessionq Actor (blocks until the runtime stops the process)."""
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(serve(executor, card))
