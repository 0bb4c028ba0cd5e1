"""Scenario `process`: the process runtime (issue 18) against the bare costs it is made of.

Baselines measured in the same run: the interpreter's cold start (`python -c pass`), the agent's
own imports (`python -c "import sessionq.agentkit"`), and `tar czf` / `tar xzf` of the very
directories the runtime snapshots and restores.

Measured:
- snapshot (`suspend_actor` of an Actor whose durable directory holds N MB: stop the process,
  archive, rename, record) and restore (`resume_actor`: restore into a fresh directory, start);
  the Actor runs `sleep`, so the process costs nothing: what is left is the archive work;
- turns of my-first-agent (examples/agents/first_agent.py, a2a-sdk + sessionq.agentkit) through
  the real API and worker in this process: each turn finds the Actor suspended, so it is resume +
  turn (SendMessage latency) and then the suspend the quiescence does (until SUSPENDED): p50/p99,
  with one warm interpreter (the default; each turn once a warm interpreter is ready, and back to
  back) and, as the same run's baseline, with none (every agent process started cold);
- turns/s with A Actors taking turns at once (one turn per Actor in flight);
- memory: processes held by suspended Actors (none), the RSS of a running agent process.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from uuid import UUID

from tests.bench.common import Server, ratio, say, summary_ms, table

REPO = Path(__file__).resolve().parents[2]
FIRST_AGENT = REPO / "examples" / "agents" / "first_agent.py"
NS = "kagent"


def _time_cmd(argv: list[str], runs: int, cwd: Path | None = None) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out.append(time.perf_counter() - t0)
    return out


def _fill(directory: Path, megabytes: int) -> None:
    """Half random (incompressible), half text (compressible) files of 1 MB each."""
    directory.mkdir(parents=True, exist_ok=True)
    text = (b"the quick brown fox jumps over the lazy dog %d\n" * 20000)[: 1 << 20]
    for i in range(megabytes):
        (directory / f"f{i:04d}.bin").write_bytes(os.urandom(1 << 20) if i % 2 == 0 else text)


def _tar_times(source: Path, runs: int) -> tuple[list[float], list[float]]:
    work = Path(tempfile.mkdtemp(prefix="bench-tar-"))
    try:
        archive = work / "a.tar.gz"
        create = _time_cmd(["tar", "-C", str(source), "-czf", str(archive), "."], runs)
        extract = []
        for _ in range(runs):
            dest = work / "x"
            shutil.rmtree(dest, ignore_errors=True)
            dest.mkdir()
            t0 = time.perf_counter()
            subprocess.run(["tar", "-C", str(dest), "-xzf", str(archive)], check=True)
            extract.append(time.perf_counter() - t0)
        return create, extract
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _rss_kb(pid: int) -> int | None:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return None


def _p50(values: list[float]) -> float | None:
    return summary_ms(values)["p50_ms"]


async def _archive_part(url: str, root: Path, sizes_mb: list[int], runs: int) -> list[dict[str, Any]]:
    from sessionq.runtime.process import ProcessConfig, ProcessSubstrate

    rows = []
    rt = ProcessSubstrate(url, ProcessConfig(root=root, slots=4, stop_grace=2.0, warm_interpreters=0,  # runs `sleep`
                                             isolation="none"))
    await rt.open()
    try:
        await rt.create_actor_template(NS, "sleeper", "local/sleep:1", command=["sleep"], args=["100000"])
        for mb in sizes_mb:
            name = f"dir-{mb}mb"
            actor = await rt.create_actor(NS, name, f"{NS}/sleeper")
            await rt.resume_actor(NS, name, actor.uid)
            await asyncio.to_thread(_fill, rt.data_dir(actor.uid), mb)
            sample = Path(tempfile.mkdtemp(prefix="bench-dir-"))
            await asyncio.to_thread(shutil.copytree, rt.data_dir(actor.uid), sample / "d")
            snap, restore = [], []
            for _ in range(runs):
                t0 = time.perf_counter()
                await rt.suspend_actor(NS, name, actor.uid)
                snap.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                await rt.resume_actor(NS, name, actor.uid)
                restore.append(time.perf_counter() - t0)
            await rt.delete_actor(NS, name, actor.uid, any_state=True)
            tar_c, tar_x = await asyncio.to_thread(_tar_times, sample / "d", runs)
            shutil.rmtree(sample, ignore_errors=True)
            rows.append({
                "megabytes": mb,
                "snapshot": summary_ms(snap),
                "restore": summary_ms(restore),
                "tar_czf": summary_ms(tar_c),
                "tar_xzf": summary_ms(tar_x),
                "snapshot_ratio_to_tar": ratio(_p50(snap), _p50(tar_c)),
                "restore_ratio_to_tar": ratio(_p50(restore), _p50(tar_x)),
            })
    finally:
        await rt.close()
    return rows


async def _turns_part(url: str, root: Path, turns: int, actors: int, warm: int = 1,
                      isolation: str = "none") -> dict[str, Any]:
    """Turns of my-first-agent; `warm` warm interpreters (0: every agent process starts cold). With
    warm interpreters, the sequential turns are measured twice: each after the runtime has a ready
    warm interpreter (a turn that comes later than a warm interpreter's start, as between a
    person's messages) and back to back (the next turn at once: the replacement warm interpreter
    may still be importing). Without, only the sequential turns (the cold baseline)."""
    import grpc
    from a2a.types import a2a_pb2, a2a_pb2_grpc

    from sessionq import config
    from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2, sessions_pb2_grpc
    from sessionq.api.server import ApiServer
    from sessionq.app.worker import run_worker
    from sessionq.db.store import Store
    from sessionq.domain.agents import compile_egress, parse_spec, prepare_revision
    from sessionq.runtime.base import ActorState
    from sessionq.runtime.process import ProcessConfig, ProcessSubstrate
    from tests.process.conftest import processes_with

    settings = config.defaults().with_overrides(**{
        "workers.pollInterval": 0.2,
        "auth.tokens": {"bench-token": "bench"},
        "auth.anonymousUser": "",
        "workers.concurrency": 16,
    })
    md = [("authorization", "Bearer bench-token")]
    store = await Store.open(url, pool_size=10)
    rt = ProcessSubstrate(url, ProcessConfig(root=root, slots=max(actors, 2), stop_grace=3.0, warm_interpreters=warm,
                                             isolation=isolation, sandbox_paths=(str(FIRST_AGENT.parent),)))
    await rt.open()
    stop = asyncio.Event()
    worker = asyncio.create_task(run_worker(settings, url, store, rt, stop=stop, name="bench-worker"))
    server = ApiServer(settings, store, address="127.0.0.1:0", runtime=rt)
    await server.start()
    rt.taskstore_address = f"127.0.0.1:{server.port}"
    channel = grpc.aio.insecure_channel(rt.taskstore_address)
    a2a = a2a_pb2_grpc.A2AServiceStub(channel)
    sessions = sessions_pb2_grpc.SessionServiceStub(channel)
    try:
        spec = parse_spec({"name": "my-first-agent", "command": [sys.executable, str(FIRST_AGENT)]})
        await store.apply_agent(NS, spec.name, spec.to_json(), spec.spec_hash(), spec.image, compile_egress(spec), "bench")
        await prepare_revision(store, rt, (await store.get_agent(NS, spec.name)).desired_revision_id)

        async def new_session(i: int) -> str:
            r = await sessions.CreateSession(sessions_pb2.CreateSessionRequest(
                request_id=f"bench-{i}", agent=common_pb2.ResourceReference(namespace=NS, name=spec.name)),
                metadata=md, timeout=60)
            return str(r.session.id)

        async def suspended(sid: str) -> Any:
            session = await store.session_by_id(UUID(sid))
            assert session is not None
            while True:
                actor = await rt.get_actor(session.actor_atespace, session.actor_name)
                if actor.state == ActorState.SUSPENDED and actor.snapshots:
                    return actor
                await asyncio.sleep(0.01)

        async def turn(sid: str, text: str) -> tuple[float, float]:
            msg = a2a_pb2.Message(message_id=f"m-{time.monotonic_ns()}", role=a2a_pb2.ROLE_USER, context_id=sid,
                                  parts=[a2a_pb2.Part(text=text)])
            t0 = time.perf_counter()
            r = await a2a.SendMessage(a2a_pb2.SendMessageRequest(tenant=f"{NS}/{spec.name}", message=msg),
                                      metadata=md, timeout=120)
            answered = time.perf_counter() - t0
            assert r.task.status.state == a2a_pb2.TASK_STATE_COMPLETED, r.task.status
            await suspended(sid)
            return answered, time.perf_counter() - t0

        sid = await new_session(0)
        await turn(sid, "What is 1+1?")  # the first process start warms the page cache
        answered, full = [], []
        rss_kb = None
        for i in range(turns):
            if warm:
                await rt.warm_ready(120)
            a, f = await turn(sid, f"What is {i}+{i}?")
            answered.append(a)
            full.append(f)
        session = await store.session_by_id(UUID(sid))
        assert session is not None
        back_to_back: list[float] = []
        if warm:
            for i in range(turns):
                _, f = await turn(sid, f"What is {i}*{i}?")
                back_to_back.append(f)
        else:
            return {"turn_answered": summary_ms(answered), "turn_full": summary_ms(full)}
        # the RSS of a running agent: resume it and read its status
        session = await store.session_by_id(UUID(sid))
        assert session is not None
        actor = await rt.get_actor(session.actor_atespace, session.actor_name)
        await rt.resume_actor(session.actor_atespace, session.actor_name, actor.uid)
        pid = rt.pid_of(actor.uid)
        await asyncio.sleep(3.0)  # its imports done
        if pid is not None:
            rss_kb = _rss_kb(pid)
        await rt.suspend_actor(session.actor_atespace, session.actor_name, actor.uid)

        sids = [await new_session(i + 1) for i in range(actors)]
        t0 = time.perf_counter()
        rounds = 2
        for r_ in range(rounds):
            await asyncio.gather(*(turn(s, f"What is {r_}*7?") for s in sids))
        elapsed = time.perf_counter() - t0
        interpreters = set(rt.warm_pids())
        idle_processes = len([p for p in processes_with(str(root)) if p not in interpreters])
        return {
            "turn_answered": summary_ms(answered),
            "turn_full": summary_ms(full),
            "turn_full_back_to_back": summary_ms(back_to_back),
            "warm_interpreters": warm,
            "concurrent": {"actors": actors, "turns": actors * rounds, "seconds": round(elapsed, 2),
                           "turns_per_s": round(actors * rounds / elapsed, 2)},
            "running_agent_rss_kb": rss_kb,
            "processes_held_by_suspended_actors": idle_processes,
        }
    finally:
        await channel.close()
        await server.stop(0)
        stop.set()
        await asyncio.wait_for(worker, 60)
        await rt.close()
        await store.close()


READY_PROGRAM = "open('ready', 'w').write('1'); import time; time.sleep(3600)"


async def _sandbox_starts(url: str, root: Path, runs: int) -> dict[str, Any]:
    """Sandbox start: resume_actor of a suspended Actor whose program (python -c, no imports) writes
    `ready` in its working directory (its durable directory) -> the file is there, at each level this
    machine has; and a bash call of the agent kit vs the same command run directly."""
    from sessionq.agentkit import tools
    from sessionq.runtime.process import ProcessConfig, ProcessSubstrate
    from sessionq.runtime.process.sandbox import Isolation, unavailable

    starts: dict[str, Any] = {}
    for level in Isolation:
        if unavailable(level) is not None:
            starts[level.value] = None
            continue
        rt = ProcessSubstrate(url, ProcessConfig(root=root / level.value, slots=2, stop_grace=1.0,
                                                 warm_interpreters=0, isolation=level))
        await rt.open()
        try:
            name = f"start-{level.value}"
            await rt.create_actor_template(NS, name, "x", command=[sys.executable, "-c", READY_PROGRAM])
            uid = (await rt.create_actor(NS, name, f"{NS}/{name}")).uid
            times = []
            for _ in range(runs):
                t0 = time.perf_counter()
                await rt.resume_actor(NS, name, uid)
                ready = rt.data_dir(uid) / "ready"
                while not ready.exists():
                    await asyncio.sleep(0.002)
                times.append(time.perf_counter() - t0)
                await rt.suspend_actor(NS, name, uid)
                await rt.delete_actor(NS, name, uid)
                uid = (await rt.create_actor(NS, name, f"{NS}/{name}")).uid
            starts[level.value] = summary_ms(times)
        finally:
            await rt.close()
    os.environ.setdefault("SESSIONQ_DATA_DIR", str(root / "bash"))
    (root / "bash").mkdir(parents=True, exist_ok=True)
    tool, direct = [], []
    for _ in range(runs * 4):
        t0 = time.perf_counter()
        await tools.bash("true")
        tool.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        await asyncio.to_thread(subprocess.run, ["bash", "-c", "true"], check=True)
        direct.append(time.perf_counter() - t0)
    return {"sandbox_start": starts, "bash_tool": summary_ms(tool), "bash_direct": summary_ms(direct)}
async def _between_turns_part(url: str, root: Path, follow_ups: int, messages: int, senders: int,
                              isolation: str = "none") -> dict[str, Any]:
    """Between turns, on the process runtime: a follow-up turn inside the keep-warm window (the Actor
    still running: no resume) against a turn on a suspended Actor (resume from its archive), both
    measured in the same run, at isolation `isolation` (none, as the turns above: the quickest resume,
    a warm interpreter ready; a sandboxed resume takes seconds); then `messages` messages sent to one Session by one sender, one after
    the other, against the same number sent by `senders` concurrent senders with busy policy
    enqueue (each waits for its own answer): messages/s and latency per message."""
    import grpc
    from a2a.types import a2a_pb2, a2a_pb2_grpc

    from sessionq import config
    from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2, sessions_pb2_grpc
    from sessionq.api.server import ApiServer
    from sessionq.app.worker import run_worker
    from sessionq.db.store import Store
    from sessionq.domain.agents import compile_egress, parse_spec, prepare_revision
    from sessionq.runtime.base import ActorState
    from sessionq.runtime.process import ProcessConfig, ProcessSubstrate

    settings = config.defaults().with_overrides(**{
        "workers.pollInterval": 0.2, "auth.tokens": {"bench-token": "bench"}, "auth.anonymousUser": "",
        "workers.concurrency": 16,
    })
    md = [("authorization", "Bearer bench-token")]
    store = await Store.open(url, pool_size=10)
    rt = ProcessSubstrate(url, ProcessConfig(root=root, slots=4, stop_grace=3.0, warm_interpreters=1,
                                             isolation=isolation))
    await rt.open()
    stop = asyncio.Event()
    worker = asyncio.create_task(run_worker(settings, url, store, rt, stop=stop, name="bench-worker"))
    server = ApiServer(settings, store, address="127.0.0.1:0", runtime=rt)
    await server.start()
    rt.taskstore_address = f"127.0.0.1:{server.port}"
    channel = grpc.aio.insecure_channel(rt.taskstore_address)
    a2a = a2a_pb2_grpc.A2AServiceStub(channel)
    sessions = sessions_pb2_grpc.SessionServiceStub(channel)
    try:
        agents = {"warm": {"keepWarm": "600s"}, "cold": {}}
        for name, extra in agents.items():
            spec = parse_spec({"name": f"agent-{name}", "command": [sys.executable, str(FIRST_AGENT)], **extra})
            await store.apply_agent(NS, spec.name, spec.to_json(), spec.spec_hash(), spec.image,
                                    compile_egress(spec), "bench")
            await prepare_revision(store, rt, (await store.get_agent(NS, spec.name)).desired_revision_id)

        async def new_session(agent: str, i: int) -> str:
            r = await sessions.CreateSession(sessions_pb2.CreateSessionRequest(
                request_id=f"bench-{agent}-{i}", agent=common_pb2.ResourceReference(namespace=NS, name=agent)),
                metadata=md, timeout=60)
            return str(r.session.id)

        async def actor_state(sid: str) -> ActorState:
            session = await store.session_by_id(UUID(sid))
            assert session is not None
            return (await rt.get_actor(session.actor_atespace, session.actor_name)).state

        async def turn(agent: str, sid: str, text: str, policy: str | None = None) -> float:
            msg = a2a_pb2.Message(message_id=f"m-{time.monotonic_ns()}", role=a2a_pb2.ROLE_USER, context_id=sid,
                                  parts=[a2a_pb2.Part(text=text)])
            if policy:
                msg.metadata.update({"busyPolicy": policy})
            t0 = time.perf_counter()
            r = await a2a.SendMessage(a2a_pb2.SendMessageRequest(tenant=f"{NS}/{agent}", message=msg),
                                      metadata=md, timeout=300)
            assert r.task.status.state == a2a_pb2.TASK_STATE_COMPLETED, r.task.status
            return time.perf_counter() - t0

        warm_sid = await new_session("agent-warm", 0)
        cold_sid = await new_session("agent-cold", 0)
        await turn("agent-warm", warm_sid, "What is 1+1?")
        await turn("agent-cold", cold_sid, "What is 1+1?")
        warm: list[float] = []
        suspended: list[float] = []
        for i in range(follow_ups):
            assert await actor_state(warm_sid) == ActorState.RUNNING
            warm.append(await turn("agent-warm", warm_sid, f"What is {i}+{i}?"))
            while await actor_state(cold_sid) != ActorState.SUSPENDED:
                await asyncio.sleep(0.01)
            await rt.warm_ready(120)
            suspended.append(await turn("agent-cold", cold_sid, f"What is {i}+{i}?"))

        # enqueue: one sender, one message after the other, then `senders` at once on another Session
        t0 = time.perf_counter()
        single = [await turn("agent-warm", warm_sid, f"What is {i}*2?") for i in range(messages)]
        single_s = time.perf_counter() - t0
        queue_sid = await new_session("agent-warm", 1)
        await turn("agent-warm", queue_sid, "What is 0+0?")

        async def sender(k: int) -> list[float]:
            return [await turn("agent-warm", queue_sid, f"What is {k}*{j}?", "enqueue")
                    for j in range(max(1, messages // senders))]

        t0 = time.perf_counter()
        per_sender = await asyncio.gather(*(sender(k) for k in range(senders)))
        concurrent_s = time.perf_counter() - t0
        queued = [x for xs in per_sender for x in xs]
        return {
            "follow_up_inside_keep_warm": summary_ms(warm),
            "turn_on_suspended_actor": summary_ms(suspended),
            "enqueue": {
                "messages": len(queued), "senders": senders,
                "single_sender": {"messages_per_s": round(len(single) / single_s, 2), **summary_ms(single)},
                "concurrent_senders": {"messages_per_s": round(len(queued) / concurrent_s, 2),
                                       **summary_ms(queued)},
                # what going through the queue adds to each message, beyond the turns themselves
                "added_ms_per_queued_message": round((concurrent_s / len(queued) - single_s / len(single)) * 1000, 1),
            },
        }
    finally:
        await channel.close()
        await server.stop(0)
        stop.set()
        await asyncio.wait_for(worker, 60)
        await rt.close()
        await store.close()


async def run(srv: Server, log_dir: Path, quick: bool, sizes: dict[str, Any] | None = None) -> dict[str, Any]:
    sizes = {
        "megabytes": [1, 20] if quick else [1, 100],
        "archive_runs": 3 if quick else 5,
        "turns": 5 if quick else 20,
        "actors": 4 if quick else 50,
        "interpreter_runs": 10 if quick else 30,
        "start_runs": 5 if quick else 20,
        "follow_ups": 5 if quick else 20,
        "queued_messages": 16 if quick else 64,
        "senders": 16,
        **(sizes or {}),
    }
    root = Path(tempfile.mkdtemp(prefix="sessionq-bench-process-"))
    try:
        interp = await asyncio.to_thread(_time_cmd, [sys.executable, "-c", "pass"], int(sizes["interpreter_runs"]))
        imports = await asyncio.to_thread(
            _time_cmd, [sys.executable, "-c", "import sessionq.agentkit"], max(3, int(sizes["interpreter_runs"]) // 3)
        )
        archive_rows = await _archive_part(srv.fresh_database("process_a"), root / "a", list(sizes["megabytes"]),
                                           int(sizes["archive_runs"]))
        cold = await _turns_part(srv.fresh_database("process_c"), root / "c", int(sizes["turns"]), 0, warm=0)
        turns = await _turns_part(srv.fresh_database("process_t"), root / "t", int(sizes["turns"]), int(sizes["actors"]))
        from sessionq.runtime.process.sandbox import Isolation, unavailable

        levels = [level for level in (Isolation.GVISOR, Isolation.NAMESPACES) if unavailable(level) is None]
        # with a warm sandbox (runtime.process.warmInterpreters 1, the default), and every sandbox cold
        sandboxed = {
            level.value: await _turns_part(srv.fresh_database(f"process_{level.value[0]}"), root / level.value,
                                           int(sizes["turns"]), 0, warm=1, isolation=level.value)
            for level in levels
        }
        sandboxed_cold = {
            level.value: await _turns_part(srv.fresh_database(f"process_{level.value[0]}c"), root / f"{level.value}-c",
                                           int(sizes["turns"]), 0, warm=0, isolation=level.value)
            for level in levels
        }
        starts = await _sandbox_starts(srv.fresh_database("process_s"), root / "s", int(sizes["start_runs"]))
        between = await _between_turns_part(srv.fresh_database("process_b"), root / "b", int(sizes["follow_ups"]),
                                            int(sizes["queued_messages"]), int(sizes["senders"]))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    interp_ms = _p50(interp)
    imports_ms = _p50(imports)
    small = archive_rows[0]
    budget = 3 * ((interp_ms or 0) + (small["tar_czf"]["p50_ms"] or 0))
    say(
        table("process runtime: snapshot / restore vs tar (p50 ms)",
              ["MB", "snapshot", "tar czf", "ratio", "restore", "tar xzf", "ratio"],
              [[r["megabytes"], r["snapshot"]["p50_ms"], r["tar_czf"]["p50_ms"], r["snapshot_ratio_to_tar"],
                r["restore"]["p50_ms"], r["tar_xzf"]["p50_ms"], r["restore_ratio_to_tar"]] for r in archive_rows]),
        table("process runtime: a turn on a suspended Actor (ms)",
              ["what", "p50", "p99", "baseline", "ratio"],
              [["resume + turn (answer)", turns["turn_answered"]["p50_ms"], turns["turn_answered"]["p99_ms"],
                interp_ms, ratio(turns["turn_answered"]["p50_ms"], interp_ms)],
               ["resume + turn + suspend", turns["turn_full"]["p50_ms"], turns["turn_full"]["p99_ms"], budget / 3,
                ratio(turns["turn_full"]["p50_ms"], budget / 3)],
               ["  the same, back to back", turns["turn_full_back_to_back"]["p50_ms"],
                turns["turn_full_back_to_back"]["p99_ms"], budget / 3,
                ratio(turns["turn_full_back_to_back"]["p50_ms"], budget / 3)],
               ["  the same, cold (warmInterpreters 0)", cold["turn_full"]["p50_ms"], cold["turn_full"]["p99_ms"],
                budget / 3, ratio(cold["turn_full"]["p50_ms"], budget / 3)],
               ["python -c pass", interp_ms, None, None, None],
               ["python -c 'import sessionq.agentkit'", imports_ms, None, None, None]]),
        table("isolation: a turn on a suspended Actor (resume + turn + suspend, ms) vs none (warm, the default)",
              ["level", "p50", "p99", "none p50", "ratio", "target"],
              [[level, r["turn_full"]["p50_ms"], r["turn_full"]["p99_ms"], turns["turn_full"]["p50_ms"],
                ratio(r["turn_full"]["p50_ms"], turns["turn_full"]["p50_ms"]), target]
               for level, r, target in [(k, v, "<= 1.5x" if k == "gvisor" else "<= 1.2x")
                                        for k, v in sandboxed.items()]]
              + [[f"{k}, cold sandbox (warmInterpreters 0)", v["turn_full"]["p50_ms"], v["turn_full"]["p99_ms"],
                  turns["turn_full"]["p50_ms"], ratio(v["turn_full"]["p50_ms"], turns["turn_full"]["p50_ms"]), ""]
                 for k, v in sandboxed_cold.items()]
              + [["none, cold", cold["turn_full"]["p50_ms"], cold["turn_full"]["p99_ms"], turns["turn_full"]["p50_ms"],
                  ratio(cold["turn_full"]["p50_ms"], turns["turn_full"]["p50_ms"]), ""]]),
        table("isolation: sandbox start (resume -> a python -c program ready, ms)",
              ["level", "p50", "p99"],
              [[k, v["p50_ms"] if v else None, v["p99_ms"] if v else None] for k, v in starts["sandbox_start"].items()]),
        f"bash tool call ('true'): p50 {starts['bash_tool']['p50_ms']} ms vs bash -c true directly "
        f"{starts['bash_direct']['p50_ms']} ms",
        table("between turns (ms)", ["what", "p50", "p99", "baseline", "ratio"],
              [["follow-up inside keep-warm", between["follow_up_inside_keep_warm"]["p50_ms"],
                between["follow_up_inside_keep_warm"]["p99_ms"], between["turn_on_suspended_actor"]["p50_ms"],
                ratio(between["follow_up_inside_keep_warm"]["p50_ms"], between["turn_on_suspended_actor"]["p50_ms"])],
               [f"enqueue, {between['enqueue']['senders']} senders (per message)",
                between["enqueue"]["concurrent_senders"]["p50_ms"], between["enqueue"]["concurrent_senders"]["p99_ms"],
                between["enqueue"]["single_sender"]["p50_ms"],
                ratio(between["enqueue"]["concurrent_senders"]["p50_ms"], between["enqueue"]["single_sender"]["p50_ms"])]]),
        f"enqueue: {between['enqueue']['concurrent_senders']['messages_per_s']} messages/s with "
        f"{between['enqueue']['senders']} senders vs {between['enqueue']['single_sender']['messages_per_s']} with one; "
        f"{between['enqueue']['added_ms_per_queued_message']} ms added per queued message",
        f"concurrent: {turns['concurrent']['actors']} Actors, {turns['concurrent']['turns_per_s']} turns/s; "
        f"running agent RSS {turns['running_agent_rss_kb']} kB; processes of suspended Actors: "
        f"{turns['processes_held_by_suspended_actors']}",
    )
    return {
        "sizes": sizes,
        "baselines": {"python_c_pass": summary_ms(interp), "python_import_agentkit": summary_ms(imports)},
        "archives": archive_rows,
        "turns": turns,
        "cold_turns": cold,
        "isolation_turns": sandboxed,
        "isolation_turns_cold": sandboxed_cold,
        "sandbox": starts,
        "between_turns": between,
        "targets": {
            **{f"{k}_turn_ratio_to_none": ratio(v["turn_full"]["p50_ms"], turns["turn_full"]["p50_ms"])
               for k, v in sandboxed.items()},
            "gvisor_within_1_5x": (ratio(sandboxed["gvisor"]["turn_full"]["p50_ms"], turns["turn_full"]["p50_ms"])
                                   or 99) <= 1.5 if "gvisor" in sandboxed else None,
            "namespaces_within_1_2x": (ratio(sandboxed["namespaces"]["turn_full"]["p50_ms"],
                                             turns["turn_full"]["p50_ms"]) or 99) <= 1.2
            if "namespaces" in sandboxed else None,
            "turn_full_p50_ms": turns["turn_full"]["p50_ms"],
            "turn_budget_ms": round(budget, 1),
            "turn_within_budget": (turns["turn_full"]["p50_ms"] or 0) <= budget,
            "turn_full_cold_p50_ms": cold["turn_full"]["p50_ms"],
            "turn_full_back_to_back_p50_ms": turns["turn_full_back_to_back"]["p50_ms"],
            "keep_warm_follow_up_ratio": ratio(between["follow_up_inside_keep_warm"]["p50_ms"],
                                               between["turn_on_suspended_actor"]["p50_ms"]),
            "keep_warm_follow_up_within_0_3x": (ratio(between["follow_up_inside_keep_warm"]["p50_ms"],
                                                      between["turn_on_suspended_actor"]["p50_ms"]) or 99) <= 0.3,
            "snapshot_within_1_5x_tar": all((r["snapshot_ratio_to_tar"] or 99) <= 1.5 for r in archive_rows),
            "restore_within_1_5x_tar": all((r["restore_ratio_to_tar"] or 99) <= 1.5 for r in archive_rows),
        },
    }
