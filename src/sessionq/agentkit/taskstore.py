"""An a2a-sdk task store backed by kagent's TaskStoreService: the Actor keeps its tasks in sessionq.

`KagentTaskStore` implements the SDK's `VersionedTaskStore`: a first write is CreateTask, every
later one UpdateTask with the version the previous write returned (a stale version, ABORTED, is the
SDK's ConcurrentTaskModificationError), a read is GetTask with its version. Every call carries the
Actor's workload credential and the turn's dispatch id. The credential is the one the request
brought (HTTP header x-sessionq-workload-token, copied into the call context under TOKEN_STATE by
the server's context builder), else the last one a request brought, else the environment's
(SESSIONQ_WORKLOAD_TOKEN, runtimes that set it at creation); the dispatch id comes with the
request's metadata (sessionq.dev/dispatch-id, copied into the call context by
`SettlingRequestHandler`). The last version written of each task is kept so that the turn can be
settled (SettleTask) at it when the SDK's execution of the request stops. In a request that settles
its turn (SETTLE_STATE, set by `SettlingRequestHandler` for SendMessage), the update to a final or
waiting state settles the task in the same write (UpdateTask with the settle header): that update is
the last of the request's turn, the SDK stops the turn when it has saved it, and one write to the
task store is saved; `settle` then has nothing left to do, unless the task store did not say it
settled the task (one that does not know the header), when it sends SettleTask as before.
"""

from __future__ import annotations

import logging

import grpc
from a2a.server.cluster.task_store import ConcurrentTaskModificationError, StoredTask, VersionedTaskStore
from a2a.server.cluster.version import TaskVersion
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.types import a2a_pb2

from sessionq.runtime.base import INVOKE_DISPATCH_KEY, INVOKE_SESSION_KEY
from sessionq.runtime.taskstore_client import TaskStoreClient, TaskStoreError

log = logging.getLogger(__name__)

__all__ = [
    "DISPATCH_STATE",
    "NEW_TASK_STATE",
    "SESSION_STATE",
    "SETTLE_STATE",
    "SETTLING_STATES",
    "TOKEN_STATE",
    "KagentTaskStore",
    "session_of_token",
]

SESSION_STATE = INVOKE_SESSION_KEY  # keys of ServerCallContext.state
DISPATCH_STATE = INVOKE_DISPATCH_KEY
TOKEN_STATE = "sessionq.dev/workload-token"
# set by the request handler for a message that names no task: the SDK gives it a new task id
NEW_TASK_STATE = "sessionq.dev/new-task"
# set by the request handler for a request whose turn it settles (SendMessage): the update to a final
# or waiting state settles the task in the same write
SETTLE_STATE = "sessionq.dev/settle"
_NEW_TASK_READ = "sessionq.dev/new-task-read"  # the new task's id, once the task store said NOT_FOUND
TOKEN_PREFIX = "sqw."


def session_of_token(token: str) -> str | None:
    """The Session a workload credential (``sqw.<session id>.<mac>``) was issued for."""
    if not token.startswith(TOKEN_PREFIX):
        return None
    sid, _, _ = token[len(TOKEN_PREFIX) :].rpartition(".")
    return sid or None


def _event(event: Event | None) -> a2a_pb2.StreamResponse | None:
    if isinstance(event, a2a_pb2.TaskStatusUpdateEvent):
        return a2a_pb2.StreamResponse(status_update=event)
    if isinstance(event, a2a_pb2.TaskArtifactUpdateEvent):
        return a2a_pb2.StreamResponse(artifact_update=event)
    if isinstance(event, a2a_pb2.Task):
        return a2a_pb2.StreamResponse(task=event)
    return None


_WAITING_STATES = frozenset({a2a_pb2.TASK_STATE_INPUT_REQUIRED, a2a_pb2.TASK_STATE_AUTH_REQUIRED})
# the states that end a turn: the task is settled at the write that reaches one
SETTLING_STATES = frozenset(
    {
        a2a_pb2.TASK_STATE_COMPLETED,
        a2a_pb2.TASK_STATE_FAILED,
        a2a_pb2.TASK_STATE_CANCELED,
        a2a_pb2.TASK_STATE_REJECTED,
        *_WAITING_STATES,
    }
)


def _value(version: TaskVersion) -> int:
    return 0 if version.is_missing else int(version._value)


class KagentTaskStore(VersionedTaskStore):
    def __init__(self, client: TaskStoreClient, token: str | None = None) -> None:
        self.client = client
        self._token = token or None  # the environment's, then the last one a request brought
        self.versions: dict[str, tuple[int, int]] = {}  # task id -> (last version written, its state)
        self.settled: dict[str, int] = {}  # task id -> the version its settling update wrote

    @property
    def default_session(self) -> str | None:
        return session_of_token(self._token) if self._token else None

    def _credential(self, context: ServerCallContext) -> str | None:
        token = context.state.get(TOKEN_STATE)
        if isinstance(token, str) and token:
            self._token = token  # this Actor's Session's: what a later request without one uses
            return token
        return self._token

    def _session(self, context: ServerCallContext) -> str:
        sid = context.state.get(SESSION_STATE) or self.default_session
        if not sid:
            raise ValueError("no session id: the request carries no sessionq.dev/session-id metadata")
        return str(sid)

    @staticmethod
    def _dispatch(context: ServerCallContext) -> str | None:
        value = context.state.get(DISPATCH_STATE)
        return str(value) if value else None

    async def save(
        self,
        task: a2a_pb2.Task,
        *,
        event: Event | None,
        prev: a2a_pb2.Task | None,
        prev_version: TaskVersion,
        context: ServerCallContext,
    ) -> TaskVersion:
        del prev
        if self._records_answer(task, event, prev_version):
            # nothing is written: the next write of this turn carries the answer in its history
            return prev_version
        token = self._credential(context)
        session = self._session(context)
        dispatch = self._dispatch(context)
        settled = False
        try:
            if prev_version.is_missing and task.id not in self.versions:
                version = await self.client.create_task(session, task, dispatch, token=token)
            else:
                expected = _value(prev_version) or self.versions.get(task.id, (0, 0))[0]
                if context.state.get(SETTLE_STATE) and int(task.status.state) in SETTLING_STATES:
                    version, settled = await self.client.finish_task(
                        session, task, expected, _event(event), dispatch, token=token
                    )
                else:
                    version = await self.client.update_task(
                        session, task, expected, _event(event), dispatch, token=token
                    )
        except TaskStoreError as exc:
            if exc.code == grpc.StatusCode.ABORTED:
                raise ConcurrentTaskModificationError(task.id) from exc
            raise
        self.versions[task.id] = (version, int(task.status.state))
        if settled:
            self.settled[task.id] = version
        return TaskVersion(version)

    def _records_answer(self, task: a2a_pb2.Task, event: Event | None, prev_version: TaskVersion) -> bool:
        """Whether this save only records the user's answer in the history of a task still waiting
        for it. When a message continues a task that waits for input (or authorization), the SDK's
        request handler first saves the whole task with the message appended to its history, its
        state still INPUT_REQUIRED / AUTH_REQUIRED, as a Task event; only then the executor's first
        event (WORKING). sessionq stages a write in a waiting state as the end of a turn (it is
        published at settlement), so that write would end the answer's turn before it started, and
        the executor's next write would be refused ("a staged final update"; the SDK's
        ConcurrentTaskModificationError). The SDK keeps the task it saved in memory and sends it
        whole with its next write, so that write carries the answer: this one is skipped, at the
        version the task is at (the version the SDK compares its next write with).

        Recognised exactly: a save of a whole task (its event the task itself) of a task that exists, at the version
        last read or written, in the waiting state that version has. An executor cannot save a
        whole task over an existing one (the SDK ignores such a Task event), so no write of the
        agent's own is skipped; a new waiting state always comes as a status event."""
        if not (event is None or isinstance(event, a2a_pb2.Task)) or prev_version.is_missing:
            return False
        state = int(task.status.state)
        if state not in _WAITING_STATES:
            return False
        return self.versions.get(task.id) == (_value(prev_version), state)

    async def get(self, task_id: str, context: ServerCallContext) -> StoredTask | None:
        token = self._credential(context)
        if token is None:
            return None  # no credential yet (a CancelTask before any turn): no task of this Actor's is known
        new = bool(context.state.get(NEW_TASK_STATE)) and task_id not in self.versions
        if new and context.state.get(_NEW_TASK_READ) == task_id:
            # the task id the SDK made for a message that names none, read once already (NOT_FOUND:
            # which also proved the request's credential before the agent runs): no such task
            # exists until this Actor creates it. The SDK reads it three times first: two round
            # trips saved.
            return None
        try:
            task, version = await self.client.get_task(self._session(context), task_id, token=token)
        except TaskStoreError as exc:
            if exc.code == grpc.StatusCode.NOT_FOUND:
                if new:
                    context.state[_NEW_TASK_READ] = task_id
                return None
            raise
        self.versions[task_id] = (version, int(task.status.state))
        return StoredTask(task, TaskVersion(version))

    async def list(self, params: a2a_pb2.ListTasksRequest, context: ServerCallContext) -> a2a_pb2.ListTasksResponse:
        token = self._credential(context)
        return await self.client.list_tasks(self._session(context), params, token=token)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        # sessionq keeps a Session's tasks (their retention is the control plane's): nothing to do
        log.debug("task %s: delete ignored (sessionq keeps a Session's tasks)", task_id)

    async def settle(self, context: ServerCallContext, task_id: str) -> bool:
        """Settle the task at the last version this Actor wrote (nothing to do when that write
        settled it already); False when it wrote none."""
        known = self.versions.get(task_id)
        if known is None:
            return False
        if self.settled.get(task_id) == known[0]:
            return True
        token = self._credential(context)
        await self.client.settle_task(self._session(context), task_id, known[0], token=token)
        return True
