"""Invariants: cheap ones while the load runs, all of them at the end.

The data: the Sessions, tasks, checkpoints and waiting jobs in PostgreSQL, the simulator's Actors,
tags and mutation log (`substrate_sim.calls`: every runtime mutation that took effect, with the
database time), the harness's audit of every Session change (`soak_audit.session_changes`:
generation, executor, dispatch and idle claim, with the database time), and the client history.

Generations are reconstructed from the audit: a generation of kind K lives from the change that
wrote its operation UUID until the change that replaced it (completion, supersession, failed
preparation). A runtime mutation on Actor ``session-<id>`` is attributed to the window that
contains its time: create_actor / egress calls to a CREATE generation, delete_actor to a DELETE
generation, suspend_actor to a SUSPEND or DELETE generation or else an idle claim (quiescence),
resume_actor to a RESUME generation or else a turn's dispatch reservation. A mutation no window
explains, or more than one mutation of a kind in one window, is a violation.
"""

from __future__ import annotations

import bisect
import contextlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from .client import LIFECYCLE_RPCS
from .history import History

FINAL_TASK_STATES = {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED",
                     "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"}
EXPECTED_STATE = {"SuspendSession": "SUSPENDED", "ResumeSession": "READY", "CreateSession": "READY",
                  "ForkSession": "READY", "DeleteSession": "DELETED"}


async def _rows(conn: psycopg.AsyncConnection[Any], sql: str, params: Any = None) -> list[dict[str, Any]]:
    cur = await conn.execute(sql, params)
    return list(await cur.fetchall())  # type: ignore[arg-type]


async def quick_check(url: str, history: History) -> None:
    """The cheap invariants, during the run: one create_actor per Actor name, no Actor of a
    DELETED Session, no create_actor after the Session's deletion (one consistent snapshot)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=3,
                                                     row_factory=dict_row) as conn:
        async with conn.transaction():
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            await conn.execute("SET LOCAL statement_timeout = '5s'")
            twice = await _rows(conn, "SELECT name, count(*) AS n, array_agg(uid) AS uids FROM substrate_sim.calls"
                                      " WHERE method = 'create_actor' GROUP BY name HAVING count(*) > 1")
            behind = await _rows(conn, "SELECT s.id, a.name, a.uid, a.state FROM sessionq.sessions s"
                                       " JOIN substrate_sim.actors a ON a.atespace = s.actor_atespace"
                                       " AND a.name = s.actor_name WHERE s.state = 'DELETED'")
    for r in twice:
        history.violation("actor-created-twice", f"{r['n']} create_actor effects for {r['name']}: {r['uids']}",
                          key=f"twice:{r['name']}")
    for r in behind:
        history.violation("actor-behind-deletion", f"session {r['id']} is DELETED but its Actor {r['name']}"
                          f" (uid {r['uid']}, {r['state']}) exists", key=f"behind:{r['id']}", session=str(r["id"]))


async def fetch(url: str, task_ids: list[str]) -> dict[str, Any]:
    """Everything the final checks look at, in one consistent snapshot."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=10,
                                                     row_factory=dict_row) as conn:
        async with conn.transaction():
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            data = {
                "now": (await _rows(conn, "SELECT clock_timestamp() AS now"))[0]["now"],
                "sessions": await _rows(conn, "SELECT *, executor_expires_at < clock_timestamp() AS claim_expired,"
                                              " dispatch_expires_at < clock_timestamp() AS dispatch_expired"
                                              " FROM sessionq.sessions"),
                "actors": await _rows(conn, "SELECT atespace, name, uid, state, worker FROM substrate_sim.actors"),
                "calls": await _rows(conn, "SELECT id, method, atespace, name, uid, detail, pid, at"
                                           " FROM substrate_sim.calls ORDER BY id"),
                "tags": await _rows(conn, "SELECT atespace, name, actor_name, actor_uid, snapshot_generation"
                                          " FROM substrate_sim.tags"),
                "checkpoints": await _rows(conn, "SELECT *, executor_expires_at < clock_timestamp() AS claim_expired"
                                                 " FROM sessionq.checkpoints"),
                "tasks": await _rows(conn, "SELECT id, session_id, state, phase FROM sessionq.tasks"
                                           " WHERE id = ANY(%s)", (task_ids,)),
                "jobs": await _rows(conn, "SELECT id, task_name, status, args, queueing_lock, attempts, worker_id"
                                          " FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"),
                "audit": await _rows(conn, "SELECT * FROM soak_audit.session_changes ORDER BY id"),
            }
    return data


@dataclass
class Window:
    start: datetime
    end: datetime | None = None  # None: still open
    kind: str = ""
    key: str = ""
    executors: set[str] = field(default_factory=set)
    counts: Counter[str] = field(default_factory=Counter)

    def contains(self, t: datetime) -> bool:
        return self.start <= t and (self.end is None or t < self.end)


@dataclass
class Timeline:
    generations: list[Window] = field(default_factory=list)
    dispatches: list[Window] = field(default_factory=list)
    idle: list[Window] = field(default_factory=list)
    deleted_at: datetime | None = None


def timelines(audit: list[dict[str, Any]]) -> dict[str, Timeline]:
    out: dict[str, Timeline] = defaultdict(Timeline)
    current: dict[str, dict[str, Window | None]] = defaultdict(lambda: {"gen": None, "dispatch": None, "idle": None})
    for row in audit:
        sid = str(row["session_id"])
        tl, cur, at = out[sid], current[sid], row["at"]
        removed = row["change"] == "DELETE"
        gen_key = None
        if not removed and row["operation"] != "NONE" and row["operation_id"] is not None:
            gen_key = f"{row['operation']}:{row['operation_id']}"
        for slot, key, kind, target in (
            ("gen", gen_key, row["operation"], tl.generations),
            ("dispatch", None if removed or row["dispatch_id"] is None else str(row["dispatch_id"]), "dispatch",
             tl.dispatches),
            # an idle claim's window is its boundary while claimed: a worker that takes the claim over
            # continues it, so two suspends of one boundary by two executors are caught
            ("idle", None if removed or row["idle_executor"] is None else str(row["idle_boundary_id"]), "idle",
             tl.idle),
        ):
            w = cur[slot]
            if w is not None and w.key != key:
                w.end = at
                cur[slot] = w = None
            if w is None and key is not None:
                w = Window(at, None, kind, key)
                target.append(w)
                cur[slot] = w
        if cur["gen"] is not None and row["executor_id"] is not None:
            cur["gen"].executors.add(str(row["executor_id"]))
        if tl.deleted_at is None and (row["state"] == "DELETED" or removed):
            tl.deleted_at = at
    return out


def _job_for(jobs: list[dict[str, Any]], task: str, arg: str, value: str) -> dict[str, Any] | None:
    return next((j for j in jobs if j["task_name"] == task and str((j["args"] or {}).get(arg)) == value), None)


def _job_text(job: dict[str, Any] | None) -> str:
    if job is None:
        return "none"
    return f"#{job['id']} {job['status']} (attempts {job['attempts']}, worker {job['worker_id']})"


def final_checks(data: dict[str, Any], history: History) -> dict[str, Any]:
    """Run every invariant; violations go to history.violations, allowed findings to
    history.reports. Returns statistics for the summary."""
    v = history.violation
    stats: dict[str, Any] = {}
    sessions = {str(s["id"]): s for s in data["sessions"]}
    actors = {(a["atespace"], a["name"]): a for a in data["actors"]}
    {a["name"]: a for a in data["actors"]}
    tl = timelines(data["audit"])

    # 1. runtime mutations: once per Actor name, attributed to a window, at most one per generation
    creates: dict[str, list[dict[str, Any]]] = defaultdict(list)
    stats["mutations"] = Counter(c["method"] for c in data["calls"])
    unattributed = 0
    for c in data["calls"]:
        name = c["name"] or ""
        if c["method"] == "create_actor":
            creates[name].append(c)
        if not name.startswith("session-") or c["method"] not in (
                "create_actor", "create_egress_policy", "update_egress_policy", "delete_actor",
                "suspend_actor", "resume_actor"):
            continue
        sid = name.removeprefix("session-")
        t = tl.get(sid, Timeline())
        at = c["at"]
        if c["method"] == "create_actor" and t.deleted_at is not None and at >= t.deleted_at:
            v("actor-created-after-deletion", f"create_actor {name} (uid {c['uid']}, pid {c['pid']}) at {at}"
              f" after session {sid} was deleted at {t.deleted_at}", session=sid)
        kinds = {"create_actor": ("CREATE",), "create_egress_policy": ("CREATE",), "update_egress_policy": ("CREATE",),
                 "delete_actor": ("DELETE",), "suspend_actor": ("SUSPEND", "DELETE"),
                 "resume_actor": ("RESUME",)}[c["method"]]
        window = next((w for w in t.generations if w.kind in kinds and w.contains(at)), None)
        if window is None and c["method"] == "suspend_actor":
            window = next((w for w in t.idle if w.contains(at)), None)
        if window is None and c["method"] == "resume_actor":
            window = next((w for w in t.dispatches if w.contains(at)), None)
        if window is None:
            unattributed += 1
            v("mutation-outside-generation", f"{c['method']} {name} (uid {c['uid']}, pid {c['pid']}) at {at}:"
              f" no {'/'.join(kinds)} generation{' or idle claim' if c['method'] == 'suspend_actor' else ''}"
              f"{' or dispatch' if c['method'] == 'resume_actor' else ''} of session {sid} was open then",
              key=f"outside:{c['id']}", session=sid)
            continue
        window.counts[c["method"]] += 1
        if c["method"] == "resume_actor" and window.kind == "dispatch":
            gen = next((w for w in t.generations if w.kind == "DELETE" and w.contains(at)), None)
            if gen is not None:
                gen.counts["resume_during_delete"] += 1
    stats["unattributed"] = unattributed
    for name, cs in creates.items():
        if len(cs) > 1:
            v("actor-created-twice", f"{len(cs)} create_actor effects for {name}: "
              + ", ".join(f"uid {c['uid']} pid {c['pid']} at {c['at']}" for c in cs), key=f"twice:{name}")
    limits = {"CREATE": {"create_actor": 1, "create_egress_policy": 1, "update_egress_policy": 1,
                         "suspend_actor": 0, "resume_actor": 0},
              "SUSPEND": {"suspend_actor": 1}, "RESUME": {"resume_actor": 1},
              "DELETE": {"delete_actor": 1, "suspend_actor": 1}}
    generations = retried = 0
    for sid, t in tl.items():
        for w in t.generations:
            generations += 1
            retried += len(w.executors) > 1
            for method, limit in limits.get(w.kind, {}).items():
                allowed = limit + (w.counts["resume_during_delete"] if w.kind == "DELETE" and method == "suspend_actor"
                                   else 0)
                if w.counts[method] > allowed:
                    v("generation-mutated-twice", f"{w.kind} generation {w.key.split(':')[1]} of session {sid}:"
                      f" {w.counts[method]} {method} effects (at most {allowed}); executors {sorted(w.executors)}",
                      session=sid)
            if w.counts["resume_during_delete"]:
                history.report("resume-during-delete", f"session {sid}: a turn's dispatch resumed the Actor while"
                               f" DELETE generation {w.key.split(':')[1]} was pending")
        for w in t.dispatches:
            if w.counts["resume_actor"] > 1:
                v("dispatch-resumed-twice", f"dispatch {w.key} of session {sid} resumed the Actor"
                  f" {w.counts['resume_actor']} times", session=sid)
        for w in t.idle:
            if w.counts["suspend_actor"] > 1:
                v("quiescence-suspended-twice", f"idle claim {w.key} of session {sid} suspended the Actor"
                  f" {w.counts['suspend_actor']} times", session=sid)
    stats["generations"] = generations
    stats["generations_retried_by_another_executor"] = retried

    # 2. live Sessions consistent with their Actors; nothing behind a deletion; no orphans
    states = Counter()
    for sid, s in sessions.items():
        states[s["state"] + ("" if s["operation"] == "NONE" else f"/{s['operation']}")] += 1
        actor = actors.get((s["actor_atespace"], s["actor_name"]))
        made = creates.get(s["actor_name"], [])
        if s["state"] == "DELETED":
            if actor is not None:
                v("actor-behind-deletion", f"session {sid} is DELETED but its Actor {s['actor_name']} (uid"
                  f" {actor['uid']}, {actor['state']}) exists", key=f"behind:{sid}", session=sid)
            continue
        if s["actor_uid"] and made and made[0]["uid"] != s["actor_uid"]:
            v("adopted-other-actor", f"session {sid} records Actor uid {s['actor_uid']} but {s['actor_name']} was"
              f" created with uid {made[0]['uid']}", session=sid)
        if s["state"] in ("READY", "SUSPENDED") and s["operation"] == "NONE":
            if actor is None:
                v("live-session-without-actor", f"session {sid} is {s['state']} but Actor {s['actor_name']} does"
                  " not exist", session=sid)
                continue
            if actor["uid"] != s["actor_uid"]:
                v("actor-uid-mismatch", f"session {sid} records uid {s['actor_uid']}, Actor {s['actor_name']} has"
                  f" {actor['uid']}", session=sid)
            if s["state"] == "SUSPENDED" and actor["state"] != "ACTOR_STATE_SUSPENDED":
                v("suspended-session-actor-not-suspended", f"session {sid} is SUSPENDED but its Actor is"
                  f" {actor['state']}", session=sid)
            if s["idle_executor"] is not None:
                # the workers resolve uncertain claims themselves: one left after the settle phase is stuck
                v("uncertain-quiescence-claim", f"session {sid}: idle claim {s['idle_executor']}"
                  f" since {s['idle_claimed_at']} (Actor {actor['state']}, uncertain since"
                  f" {s.get('idle_uncertain_at')}, {s.get('idle_attempts')} failed attempts) never recorded",
                  session=sid)
            elif (s["state"] == "READY" and actor["state"] == "ACTOR_STATE_RUNNING" and s["dispatch_id"] is None
                  and s["idle_boundary_id"] is None):
                v("actor-left-running", f"session {sid} is READY with no turn and no idle work, but its Actor is"
                  " RUNNING (holding a worker)", session=sid)
    stats["session_states"] = states
    for a in data["actors"]:
        if not a["name"].startswith("session-"):
            continue
        sid = a["name"].removeprefix("session-")
        if sid not in sessions:
            v("orphan-actor", f"Actor {a['name']} (uid {a['uid']}, {a['state']}) has no Session row", session=sid)

    # 3. claims, stuck work
    jobs = data["jobs"]
    for sid, s in sessions.items():
        if s["operation"] != "NONE":
            job = _job_for(jobs, "execute_operation", "session_id", sid)
            claim = ("no claim" if s["executor_id"] is None else
                     f"claim of {s['executor_id']} {'expired' if s['claim_expired'] else 'live'}"
                     f" until {s['executor_expires_at']}")
            what = (f"session {sid} {s['state']} still has a pending {s['operation']} (generation"
                    f" {s['operation_id']}, {claim}, job {_job_text(job)},"
                    f" failure {s['failure_reason']}: {s['failure_message']})")
            if s["executor_id"] is not None and s["claim_expired"] and job is None:
                v("dead-claim-without-retry", what, session=sid)
            else:
                v("stuck-operation", what, session=sid)
        if s["dispatch_id"] is not None:
            job = _job_for(jobs, "dispatch_turn", "session_id", sid)
            v("stuck-dispatch", f"session {sid}: dispatch {s['dispatch_id']} still reserved after the settle period"
              f" ({'expired' if s['dispatch_expired'] else 'not expired'} at {s['dispatch_expires_at']}; job"
              f" {_job_text(job)}; idle claim {s['idle_executor']})", session=sid)
        if (s["state"] == "READY" and s["operation"] == "NONE" and s["idle_boundary_id"] is not None
                and s["idle_executor"] is None and s["dispatch_id"] is None):
            v("idle-not-drained", f"session {sid}: idle boundary since {s['idle_boundary_at']} never claimed",
              session=sid)
    for c in data["checkpoints"]:
        if c["state"] in ("CREATING", "DELETING"):
            job = _job_for(jobs, "create_checkpoint" if c["state"] == "CREATING" else "delete_checkpoint",
                           "checkpoint_id", str(c["id"]))
            what = (f"checkpoint {c['id']} of session {c['session_id']} still {c['state']} (executor"
                    f" {c['executor_id']}, {'expired' if c['claim_expired'] else 'live'}; job"
                    f" {job['status'] if job else 'none'})")
            kind = "dead-claim-without-retry" if c["executor_id"] and c["claim_expired"] and not job else \
                "stuck-checkpoint"
            v(kind, what, session=str(c["session_id"]))

    # 4. tags: at most one create_tag per checkpoint tag; READY checkpoints keep their tag
    tag_creates = Counter((c["detail"] or {}).get("tag") for c in data["calls"] if c["method"] == "create_tag")
    for tag, n in tag_creates.items():
        if n > 1:
            v("tag-created-twice", f"{n} create_tag effects for {tag}")
    tags = {(t["atespace"], t["name"]): t for t in data["tags"]}
    checkpoints = {str(c["id"]): c for c in data["checkpoints"]}
    for c in data["checkpoints"]:
        if c["state"] == "READY":
            tag = tags.get((c["actor_atespace"], c["tag_name"]))
            if tag is None or tag["snapshot_generation"] != c["snapshot_generation"]:
                v("checkpoint-without-tag", f"checkpoint {c['id']} is READY but tag {c['tag_name']} is"
                  f" {'missing' if tag is None else 'on generation ' + str(tag['snapshot_generation'])}")

    # 5. acknowledged operations have their effect (from the client history)
    by_session: dict[str, list[dict[str, Any]]] = defaultdict(list)
    renames: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for a in history.attempts:
        if a["session"] and a["rpc"] in LIFECYCLE_RPCS:
            by_session[a["session"]].append(a)
        if a["session"] and a["rpc"] == "UpdateSessionName":
            renames[a["session"]].append(a)
    acked = 0
    for sid, attempts in by_session.items():
        s = sessions.get(sid)
        final = s["state"] if s is not None else "gone"
        oks = [a for a in attempts if a["code"] == "OK"]
        acked += len(oks)
        deletes = [a for a in oks if a["rpc"] == "DeleteSession"]
        deletes += [a for a in attempts if a["rpc"] == "DeleteSession" and a["code"] == "NOT_FOUND"
                    and a["attempt"] > 1]  # the earlier attempt went through
        if deletes and final not in ("DELETED", "gone"):
            d = deletes[0]
            v("acknowledged-effect-missing", f"DeleteSession of {sid} answered {d['code']} at +{d['t1']}s but the"
              f" session is {final}", session=sid)
            continue
        if not oks:
            continue
        last = max(oks, key=lambda a: a["t1"])
        later = [a for a in attempts if a is not last and a["t1"] > last["t0"]]
        expected = EXPECTED_STATE[last["rpc"]]
        if last["rpc"] in ("CreateSession", "ForkSession"):  # a retry answers with the current state
            expected = last["resp"].get("state") or expected
        if not later and final != expected and not (expected == "DELETED" and final == "gone"):
            v("acknowledged-effect-missing", f"{last['rpc']} of {sid} acknowledged at +{last['t1']}s (no later"
              f" lifecycle call) but the session is {final}, not {expected}", session=sid)
    stats["acknowledged_lifecycle"] = acked
    for sid, attempts in renames.items():
        s = sessions.get(sid)
        oks = [a for a in attempts if a["code"] == "OK"]
        if not oks or s is None or s["state"] == "DELETED":
            continue
        last = max(oks, key=lambda a: a["t1"])
        if not [a for a in attempts if a is not last and a["t1"] > last["t0"]] and s["name"] != last["resp"]["name"]:
            v("acknowledged-effect-missing", f"rename of {sid} to {last['resp']['name']!r} acknowledged but the name"
              f" is {s['name']!r}", session=sid)
    for a in history.attempts:
        if a["rpc"] == "CreateCheckpoint" and a["code"] == "OK" and a["resp"].get("state") == "CHECKPOINT_STATE_READY":
            c = checkpoints.get(a["resp"]["checkpoint"])
            if c is None or c["state"] != "READY":
                v("acknowledged-effect-missing", f"checkpoint {a['resp']['checkpoint']} acknowledged READY but is"
                  f" {c['state'] if c else 'gone'}", session=a["session"])

    # 6. no lost turn: every task a SendMessage returned is in PostgreSQL, in that state if final
    stored = {t["id"]: t for t in data["tasks"]}
    turns = 0
    for a in history.attempts:
        if a["rpc"] != "SendMessage" or a["code"] != "OK" or not a["resp"].get("task"):
            continue
        turns += 1
        tid, state = a["resp"]["task"], a["resp"]["state"]
        t = stored.get(tid)
        if t is None:
            v("lost-turn", f"task {tid} returned {state} by SendMessage to {a['session']} at +{a['t1']}s is not"
              " stored", session=a["session"])
        elif str(t["session_id"]) != a["resp"].get("context"):
            v("lost-turn", f"task {tid} is stored for session {t['session_id']}, returned for {a['resp'].get('context')}",
              session=a["session"])
        elif state in FINAL_TASK_STATES and t["state"] != state:
            v("lost-turn", f"task {tid} returned {state} at +{a['t1']}s is now {t['state']} ({t['phase']})",
              session=a["session"])
    stats["turns_returned"] = turns
    return stats


def window_bounds(values: list[float], lo: float, hi: float) -> int:
    """How many sorted values fall in [lo, hi)."""
    return bisect.bisect_left(values, hi) - bisect.bisect_left(values, lo)


def throughput(history: History, load_start: float, load_end: float, pg_events: list[dict[str, Any]],
               bucket: float = 5.0) -> dict[str, Any]:
    """Successful logical operations per second: in buckets, and around each PostgreSQL restart
    (baseline: the 10 s before it went down; recovery: the first 3-s window after it answered again
    whose rate is at least 90 % of the baseline; reported as the end of that window, in seconds
    after PostgreSQL was back)."""
    done = sorted(o["t1"] for o in history.ops if o["code"] == "OK")
    buckets = []
    t = load_start
    while t < load_end - 1.0:
        end = min(t + bucket, load_end)
        buckets.append({"from": round(t - load_start, 1), "to": round(end - load_start, 1),
                        "ops_per_s": round(window_bounds(done, t, end) / (end - t), 2)})
        t = end
    restarts = []
    for ev in pg_events:
        base_from = max(load_start, ev["down"] - 10.0)
        base = window_bounds(done, base_from, ev["down"]) / max(ev["down"] - base_from, 1e-9)
        recovered = None
        d = 0.0
        while ev["up"] + d + 3.0 <= load_end:
            rate = window_bounds(done, ev["up"] + d, ev["up"] + d + 3.0) / 3.0
            if rate >= 0.9 * base:
                recovered = d + 3.0
                break
            d += 0.25
        during = window_bounds(done, ev["down"], ev["up"])
        # the first call begun after the kill that succeeded, and the first 3-s window at >= 90 %
        first_ok = min((a["t1"] for a in history.attempts if a["code"] == "OK" and a["t0"] >= ev["down"]),
                       default=None)
        restarts.append({
            "down_at": round(ev["down"] - load_start, 2), "up_at": round(ev["up"] - load_start, 2),
            "down_for": round(ev["up"] - ev["down"], 2), "how": ev.get("how", ""),
            "baseline_ops_per_s": round(base, 2), "ops_while_down": during,
            "recovered_after_s": None if recovered is None else round(recovered, 2),
            "target_met": recovered is not None and recovered <= 10.0,
            "first_ok_after_down_s": None if first_ok is None else round(first_ok - ev["down"], 2),
            "full_throughput_after_down_s": None if recovered is None else round(ev["up"] - ev["down"] + recovered, 2),
        })
    total = window_bounds(done, load_start, load_end)
    return {"buckets": buckets, "restarts": restarts,
            "mean_ops_per_s": round(total / max(load_end - load_start, 1e-9), 2)}


async def sim_fault_hits(url: str) -> dict[int, int]:
    with contextlib.suppress(Exception):
        async with await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=5) as conn:
            cur = await conn.execute("SELECT id, hits FROM substrate_sim.faults")
            return {int(r[0]): int(r[1]) for r in await cur.fetchall()}
    return {}
