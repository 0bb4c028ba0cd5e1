"""A test agent that takes what its turn asks for: ``memory N`` holds N MiB (every page written),
``cpu S N`` spins S seconds of wall-clock time in N processes and notes in cpu.json of its durable
directory how much CPU time its own process got; anything else is answered at once. Each answer is a bare A2A Message."""

import json
import os
import time
from pathlib import Path

from sessionq import agentkit  # first: the process starts faster (docs/runtime.md, "Costs")  # isort: skip

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import a2a_pb2

held: list[bytes] = []


def spin(seconds: float) -> dict[str, float]:
    wall0, cpu0 = time.monotonic(), time.process_time()
    while time.monotonic() - wall0 < seconds:
        sum(range(10_000))
    wall, cpu = time.monotonic() - wall0, time.process_time() - cpu0
    return {"wall": wall, "cpu": cpu, "share": cpu / wall}


class Hog(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        words = context.get_user_input().split()
        text = "ok"
        if words[:1] == ["memory"]:
            for _ in range(int(words[1])):
                held.append(b"\x01" * (1 << 20))
            text = f"holding {len(held)} MiB"
        elif words[:1] == ["cpu"]:
            helpers = []
            for _ in range(int(words[2]) - 1 if len(words) > 2 else 0):
                pid = os.fork()
                if pid == 0:
                    spin(float(words[1]))
                    os._exit(0)
                helpers.append(pid)
            result = spin(float(words[1]))
            for pid in helpers:
                os.waitpid(pid, 0)  # noqa: ASYNC222 (the turn blocks on purpose: it spins)
            (Path(agentkit.data_dir()) / "cpu.json").write_text(json.dumps(result))
            text = f"cpu share {result['share']:.2f}"
        await event_queue.enqueue_event(a2a_pb2.Message(
            message_id=f"hog-{time.monotonic_ns()}", role=a2a_pb2.ROLE_AGENT, context_id=context.context_id or "",
            parts=[a2a_pb2.Part(text=text)]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


if __name__ == "__main__":
    agentkit.run(Hog())
