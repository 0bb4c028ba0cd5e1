"""A test agent whose turn works for a minute (sleeping) unless it is cancelled: A2A CancelTask
to its endpoint makes the SDK call `cancel` (noted in cancelled.txt of its durable directory) and
cancel `execute` (noted in interrupted.txt), so a snapshot shows that the cancel reached the process."""

import asyncio
from pathlib import Path

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import a2a_pb2

from sessionq import agentkit


def note(name: str, text: str) -> None:
    with (Path(agentkit.data_dir()) / name).open("a") as f:
        f.write(text + "\n")


class Slow(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        if context.current_task is None and context.message is not None:
            await event_queue.enqueue_event(a2a_pb2.Task(
                id=context.task_id, context_id=context.context_id,
                status=a2a_pb2.TaskStatus(state=a2a_pb2.TASK_STATE_WORKING), history=[context.message]))
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            note("interrupted.txt", context.task_id or "")
            raise
        note("finished.txt", context.task_id or "")
        await updater.complete(updater.new_agent_message([a2a_pb2.Part(text="done")]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        note("cancelled.txt", context.task_id or "")
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


if __name__ == "__main__":
    agentkit.run(Slow())
