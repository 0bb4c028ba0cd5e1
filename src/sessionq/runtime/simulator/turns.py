"""One turn of the simulated agent, played as an Actor plays it: the deterministic agent
(runtime/deterministic_agent.py) answers, and the turn is reported to the TaskStoreService
(runtime/taskstore_client.py)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from a2a.types import a2a_pb2
from google.protobuf.timestamp_pb2 import Timestamp

from sessionq.runtime.base import InvokeRequest
from sessionq.runtime.deterministic_agent import TurnResult
from sessionq.runtime.taskstore_client import TaskStoreClient

CANCEL_CHECK = 0.05  # how often a working turn looks for a cancel (seconds)
WAITING_STATES = frozenset({a2a_pb2.TASK_STATE_INPUT_REQUIRED, a2a_pb2.TASK_STATE_AUTH_REQUIRED})


def waiting_for_input(task: a2a_pb2.Task) -> bool:
    """Whether the task a turn names waits for input (the turn is the user's answer), rather than
    being a SUBMITTED task of a turn sessionq queued behind another (a new turn)."""
    return task.status.state in WAITING_STATES


async def play_turn(
    client: TaskStoreClient,
    save_memory: Callable[[dict[str, Any]], Awaitable[None]],
    request: InvokeRequest,
    message: a2a_pb2.Message,
    turn: TurnResult,
    canceled: Callable[[str], Awaitable[bool]] | None = None,
    named: tuple[a2a_pb2.Task, int] | None = None,
) -> None:
    """Report one turn of the agent as an Actor does: the task WORKING (CreateTask, or GetTask and
    UpdateTask for a continuation), the turn's delay, its memory saved to the durable directory
    (`save_memory`), the final UpdateTask and, after native cleanup, SettleTask at that version.
    While the turn takes its time it checks `canceled(task_id)` (A2A CancelTask reached the Actor):
    a canceled turn stops there, with no further task writes (sessionq ends the task CANCELED).
    `named`: the task the request names and its version, when the caller read it already."""
    session_id = request.session_id
    user = a2a_pb2.Message()
    user.CopyFrom(message)
    user.role = a2a_pb2.ROLE_USER
    if not user.message_id:
        user.message_id = str(uuid.uuid4())

    # 1. the task is WORKING
    if request.task_id is None:
        task_id = str(uuid.uuid4())
        context_id = session_id
        user.context_id, user.task_id = context_id, task_id
        task = a2a_pb2.Task(
            id=task_id,
            context_id=context_id,
            status=a2a_pb2.TaskStatus(state=a2a_pb2.TASK_STATE_WORKING, timestamp=_now()),
        )
        task.history.append(user)
        version = await client.create_task(session_id, task, request.dispatch_id)
    else:
        task_id = request.task_id
        task, version = named if named is not None else await client.get_task(session_id, task_id)
        context_id = task.context_id or session_id
        user.context_id, user.task_id = context_id, task_id
        task.history.append(user)
        task.status.CopyFrom(a2a_pb2.TaskStatus(state=a2a_pb2.TASK_STATE_WORKING, timestamp=_now()))
        version = await client.update_task(session_id, task, version, _status_event(task), request.dispatch_id)

    # 2. the turn takes its time (the Actor stays RUNNING), then the agent saves its memory
    if turn.delay > 0:
        loop = asyncio.get_running_loop()
        until = loop.time() + turn.delay
        while (left := until - loop.time()) > 0:
            if canceled is not None and await canceled(task_id):
                return
            await asyncio.sleep(min(left, CANCEL_CHECK))
        if canceled is not None and await canceled(task_id):
            return
    await save_memory(turn.memory)

    # 3. the final update (the task store stages it until the task is settled)
    state = a2a_pb2.TaskState.Value(turn.state)
    answer = a2a_pb2.Message(
        message_id=str(uuid.uuid4()),
        context_id=context_id,
        task_id=task_id,
        role=a2a_pb2.ROLE_AGENT,
        parts=[a2a_pb2.Part(text=turn.answer)],
    )
    task.status.CopyFrom(a2a_pb2.TaskStatus(state=state, message=answer, timestamp=_now()))
    task.history.append(answer)
    if state == a2a_pb2.TASK_STATE_COMPLETED:
        task.artifacts.append(
            a2a_pb2.Artifact(artifact_id=str(uuid.uuid4()), name="answer", parts=[a2a_pb2.Part(text=turn.answer)])
        )
    version = await client.update_task(session_id, task, version, _status_event(task), request.dispatch_id)

    # 4. native cleanup (nothing to release in the simulator), then settle at the final version
    await client.settle_task(session_id, task_id, version)


def _now() -> Timestamp:
    ts = Timestamp()
    ts.GetCurrentTime()
    return ts


def _status_event(task: a2a_pb2.Task) -> a2a_pb2.StreamResponse:
    return a2a_pb2.StreamResponse(
        status_update=a2a_pb2.TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id, status=task.status)
    )
