"""my-first-agent as a real process: the deterministic agent the simulator plays (arithmetic,
"remember the number 7", "what did I ask you first?"), written with the A2A SDK (a2a-sdk). The
process runtime runs it for an Agent that names no command (``python -m
sessionq.agentkit.first_agent``); examples/agents/first_agent.py runs it too.

Its memory is a file, memory.json, in its durable directory (the working directory sessionq gives
it): sessionq snapshots that directory when it suspends the agent between turns, restores it on
the next turn, and a checkpoint's fork starts from the checkpoint's copy of it.

A message ``run: COMMAND`` runs COMMAND with the agent kit's `bash` tool (sessionq.agentkit.tools)
in its workspace, ``<durable directory>/workspace`` (``/data/workspace`` in a sandbox), and answers
with its output: the files a command writes there survive the suspend between turns and are in a
checkpoint's fork; a process it leaves running does not (the call's process group ends with it).

The one sessionq-specific line is ``run(FirstAgent())`` (sessionq.agentkit.run, in `main`), where a plain a2a-sdk
agent would build its server and run uvicorn.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import a2a_pb2

from sessionq.agentkit import tools
from sessionq.agentkit.server import data_dir, run, start_turn
from sessionq.runtime.deterministic_agent import run_turn  # the simulated agent's logic (pure, no I/O)

MEMORY = "memory.json"
RUN = "run:"  # a message that runs a command


def load_memory(directory: Path) -> dict[str, Any]:
    try:
        data = json.loads((directory / MEMORY).read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save_memory(directory: Path, memory: dict[str, Any]) -> None:
    """Write the memory atomically: a killed process leaves the old file or the new one."""
    tmp = directory / f".{MEMORY}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(memory, f, ensure_ascii=False)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / MEMORY)


WAITING_STATES = frozenset({a2a_pb2.TASK_STATE_INPUT_REQUIRED, a2a_pb2.TASK_STATE_AUTH_REQUIRED})


class FirstAgent(AgentExecutor):
    def __init__(self, directory: Path | None = None) -> None:
        self.directory = Path(directory or data_dir())

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """One turn: the task WORKING (a new task is created so, in one write), the memory saved,
        then the answer as the task's artifact (when COMPLETED) and its final status message."""
        text = context.get_user_input()
        if text.strip().lower().startswith(RUN):
            await self.run_command(context, event_queue, text.strip()[len(RUN):].strip())
            return
        # an answer continues a task waiting for input; a SUBMITTED one is a turn sessionq queued
        continuation = context.current_task is not None and context.current_task.status.state in WAITING_STATES
        turn = run_turn(load_memory(self.directory), text, continuation=continuation)
        updater = await start_turn(context, event_queue)
        if turn.delay > 0:
            await asyncio.sleep(turn.delay)
        save_memory(self.directory, turn.memory)
        answer = updater.new_agent_message([a2a_pb2.Part(text=turn.answer)])
        state = a2a_pb2.TaskState.Value(turn.state)
        if state == a2a_pb2.TASK_STATE_COMPLETED:
            await updater.add_artifact([a2a_pb2.Part(text=turn.answer)], name="answer")
            await updater.complete(answer)
        elif state == a2a_pb2.TASK_STATE_INPUT_REQUIRED:
            await updater.requires_input(answer)
        elif state == a2a_pb2.TASK_STATE_AUTH_REQUIRED:
            await updater.requires_auth(answer)
        else:
            await updater.failed(answer)

    async def run_command(self, context: RequestContext, event_queue: EventQueue, command: str) -> None:
        """One turn that runs `command` with the bash tool: its output (and a non-zero exit status) is
        the answer; a command the tool refuses fails the task, saying why."""
        updater = await start_turn(context, event_queue)
        try:
            result = await tools.bash(command)
        except ValueError as exc:
            await updater.failed(updater.new_agent_message([a2a_pb2.Part(text=f"cannot run that: {exc}")]))
            return
        answer = result.output if result.exit_code in (0, None) else f"{result.output}[exit status {result.exit_code}]"
        answer = answer or "(no output)"
        await updater.add_artifact([a2a_pb2.Part(text=answer)], name="answer")
        await updater.complete(updater.new_agent_message([a2a_pb2.Part(text=answer)]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


def main() -> None:
    run(FirstAgent())


if __name__ == "__main__":
    main()
