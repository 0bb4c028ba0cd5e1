"""An agent that makes a virtual environment in its durable directory at its first turn
(``python -m venv --without-pip``, as an agent installing tools would) and answers every turn with
what that environment's own interpreter says its prefix is (or what went wrong running it)."""

import asyncio
import subprocess
import sys
from pathlib import Path

from sessionq import agentkit  # first: the process starts faster (docs/runtime.md, "Costs")  # isort: skip

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import a2a_pb2

BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)


def prefix_of_venv(venv: Path) -> str:
    if not venv.exists():
        subprocess.run([BASE_PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    ran = subprocess.run([str(venv / "bin" / "python"), "-c", "import sys; print(sys.prefix)"],
                         capture_output=True, text=True, timeout=60)
    return f"prefix {ran.stdout.strip()}" if ran.returncode == 0 else f"failed {ran.returncode}: {ran.stderr}"


class VenvAgent(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = await asyncio.to_thread(prefix_of_venv, Path(agentkit.data_dir()) / "venv")
        updater = await agentkit.start_turn(context, event_queue)
        await updater.complete(updater.new_agent_message([a2a_pb2.Part(text=text)]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


if __name__ == "__main__":
    agentkit.run(VenvAgent())
