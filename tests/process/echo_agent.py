"""The docs' agent (docs/runtime.md, "Write your own agent"): it notes each message in a file of its
durable directory. With the argument ``message`` it answers with a bare A2A Message instead of a
task (the agent kit keeps it as a COMPLETED task)."""

import sys
from pathlib import Path

from sessionq import agentkit  # first: the process starts faster (docs/runtime.md, "Costs")  # isort: skip

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import a2a_pb2

BARE = len(sys.argv) > 1 and sys.argv[1] == "message"


class Echo(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        notes = Path(agentkit.data_dir()) / "notes.txt"
        with notes.open("a") as f:
            f.write(context.get_user_input() + "\n")
        count = len(notes.read_text().splitlines())
        if BARE:
            await event_queue.enqueue_event(a2a_pb2.Message(
                message_id=f"echo-{count}", role=a2a_pb2.ROLE_AGENT, context_id=context.context_id or "",
                parts=[a2a_pb2.Part(text=f"noted {count}")]))
            return
        updater = await agentkit.start_turn(context, event_queue)
        await updater.complete(updater.new_agent_message([a2a_pb2.Part(text=f"noted {count}")]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


if __name__ == "__main__":
    agentkit.run(Echo())
