"""The Actor's tools (requirements RT-5..RT-8), for any a2a-sdk executor run by the agent kit:

- `workspace()`: ``<durable directory>/workspace`` (``/data/workspace`` in a sandbox), created on first
  use, shared by an agent and its subagents in one Actor; it is part of the durable directory, so it
  survives suspend, resume and checkpoint forks;
- file tools (`read_file`, `write_file`, `list_files`) taking a path relative to the workspace or
  absolute (inside the sandbox: the sandbox is the boundary);
- `bash`: one command in a fresh shell per call, with the Actor's environment, the workspace as its
  working directory and both it and the skills directory (`skills_dir()`) on PYTHONPATH; a timeout
  of DEFAULT_TIMEOUT seconds unless `timeout_seconds` says otherwise (1 to MAX_TIMEOUT); stdout and
  stderr combined and captured up to OUTPUT_LIMIT bytes, with TRUNCATED after them when there was
  more; the command's whole process group killed when the call finishes, times out or is cancelled.
  Nothing of a call's command or output is logged.

Background processes are not durable work (RT-8): a command's group ends with its call, and a
suspended Actor keeps its files, never its processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path

from sessionq.agentkit.server import data_dir

__all__ = [
    "DEFAULT_TIMEOUT",
    "MAX_TIMEOUT",
    "OUTPUT_LIMIT",
    "TRUNCATED",
    "BashResult",
    "bash",
    "list_files",
    "read_file",
    "resolve",
    "skills_dir",
    "workspace",
    "write_file",
]

DEFAULT_TIMEOUT = 60
MAX_TIMEOUT = 600
OUTPUT_LIMIT = 64 * 1024
TRUNCATED = "\n[output truncated: only the first 65536 bytes are kept]\n"
SKILLS_ENV = "SESSIONQ_SKILLS_DIR"  # where the Actor's skills are (default: <durable directory>/skills)
READ_CHUNK = 64 * 1024


def workspace() -> Path:
    """The Actor's workspace, created on first use (no predefined directories inside it)."""
    path = Path(data_dir()) / "workspace"
    path.mkdir(exist_ok=True)
    return path


def skills_dir() -> Path:
    return Path(os.environ.get(SKILLS_ENV) or Path(data_dir()) / "skills")


def resolve(path: str | os.PathLike[str]) -> Path:
    """An absolute path as is; a relative one inside the workspace."""
    p = Path(path)
    return p if p.is_absolute() else workspace() / p


def read_file(path: str | os.PathLike[str]) -> str:
    return resolve(path).read_text(encoding="utf-8", errors="replace")


def write_file(path: str | os.PathLike[str], text: str) -> Path:
    target = resolve(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return target


def list_files(path: str | os.PathLike[str] = ".") -> list[str]:
    return sorted(os.listdir(resolve(path)))


@dataclass(frozen=True)
class BashResult:
    """`output`: stdout and stderr combined (at most OUTPUT_LIMIT bytes, then TRUNCATED);
    `exit_code`: the shell's (None when it timed out); `timed_out`, `truncated`."""

    output: str
    exit_code: int | None
    timed_out: bool = False
    truncated: bool = False


def _shell() -> str:
    return shutil.which("bash") or shutil.which("sh") or "/bin/sh"


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def bash(command: str, timeout_seconds: float = DEFAULT_TIMEOUT) -> BashResult:
    """Run `command` as the module docstring says. ValueError for an empty command or a timeout
    outside 1..MAX_TIMEOUT seconds (nothing runs)."""
    if not isinstance(command, str) or not command.strip() or "\x00" in command:
        raise ValueError("command: a non-empty string without NUL")
    if isinstance(timeout_seconds, bool) or not isinstance(timeout_seconds, int | float) \
            or not 1 <= timeout_seconds <= MAX_TIMEOUT:
        raise ValueError(f"timeout_seconds: between 1 and {MAX_TIMEOUT}")
    cwd = workspace()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(cwd), str(skills_dir()), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    )
    # a pipe of our own, not asyncio's: the shell's end is waited for on its own, while processes it
    # left in the background may still hold the pipe open (until the group is killed)
    read_end, write_end = os.pipe()
    try:
        process = await asyncio.create_subprocess_exec(
            _shell(), "-c", command,
            cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=write_end, stderr=write_end,
            start_new_session=True,
        )
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    loop = asyncio.get_running_loop()
    stream = asyncio.StreamReader(limit=READ_CHUNK)
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(stream), os.fdopen(read_end, "rb", buffering=0)
    )
    kept = bytearray()
    more = False

    async def collect() -> None:
        nonlocal more
        while chunk := await stream.read(READ_CHUNK):
            room = OUTPUT_LIMIT - len(kept)
            if len(chunk) > room:
                more = True
            kept.extend(chunk[: max(room, 0)])  # the rest is read and dropped: the command never blocks

    reader = loop.create_task(collect())
    timed_out = False
    try:
        await asyncio.wait_for(process.wait(), timeout_seconds)
    except TimeoutError:
        timed_out = True
    finally:
        # the whole group, whatever the call's end: finished, timed out or cancelled (what it left
        # running in the background too, which would keep the output open)
        _kill_group(process.pid)
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
        try:
            await asyncio.wait_for(asyncio.shield(reader), 5.0)  # what the pipe still holds, then EOF
        except (TimeoutError, asyncio.CancelledError):
            reader.cancel()
        transport.close()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(process.wait())
    output = kept.decode("utf-8", errors="replace") + (TRUNCATED if more else "")
    if timed_out:
        output += f"\n[timed out after {timeout_seconds:g} s: the command's process group was killed]\n"
    return BashResult(output, None if timed_out else process.returncode, timed_out, more)
