"""The stand-in runtimes' rows as the records of `runtime/base.py`.

Both schemas give templates, actors, snapshots, tags, workers and egress policies the same core
columns; what one runtime adds (a template's argv, a crash's exit status, a tag's template) is read
when the row has it. Where the runtimes store a thing differently (a snapshot's URI, a worker's
atespace and state) the caller passes it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sessionq.runtime.base import (
    Actor,
    ActorState,
    ActorTemplate,
    EgressPolicy,
    Snapshot,
    SnapshotFidelity,
    SnapshotStatus,
    Tag,
    Worker,
)
from sessionq.runtime.stand_in.egress import rule_collection

__all__ = ["actor_from_row", "policy_from_row", "snapshot_from_row", "tag_from_row", "template_from_row",
           "worker_from_row"]

Row = Mapping[str, Any]


def snapshot_from_row(row: Row, uri: str) -> Snapshot:
    """A snapshots row; `uri` is where the runtime keeps the snapshot."""
    return Snapshot(
        generation=row["generation"],
        fidelity=SnapshotFidelity(row["fidelity"]),
        status=SnapshotStatus(row["status"]),
        uri=uri,
        created_at=row["created_at"],
        size_bytes=row.get("size_bytes"),  # where the runtime's schema has it
    )


def actor_from_row(row: Row, snapshots: Iterable[Snapshot] = ()) -> Actor:
    """An actors row joined with its worker's ip (worker_ip), and its snapshots ascending; the crash
    columns where the schema has them."""
    return Actor(
        atespace=row["atespace"],
        name=row["name"],
        uid=row["uid"],
        template=row["template"],
        state=ActorState(row["state"]),
        worker=row["worker"],
        worker_ip=row["worker_ip"],
        version=row["version"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        snapshots=tuple(snapshots),
        crash_message=row.get("crash_message"),
        crash_exit_status=row.get("crash_exit_status"),
    )


def template_from_row(row: Row) -> ActorTemplate:
    """A templates row; its argv and env where the schema keeps them (the process runtime)."""
    return ActorTemplate(
        atespace=row["atespace"],
        name=row["name"],
        uid=row["uid"],
        image=row["image"],
        version=row["version"],
        created_at=row["created_at"],
        command=tuple(row.get("command") or ()),
        args=tuple(row.get("args") or ()),
        env=dict(row.get("env") or {}),
    )


def tag_from_row(row: Row, snapshot_uri: str) -> Tag:
    """A tags row; `snapshot_uri` names the tagged snapshot."""
    return Tag(
        atespace=row["atespace"],
        name=row["name"],
        actor_name=row["actor_name"],
        actor_uid=row["actor_uid"],
        snapshot_generation=row["snapshot_generation"],
        snapshot_uri=snapshot_uri,
        created_at=row["created_at"],
        template_uid=row.get("template_uid") or "",
    )


def policy_from_row(row: Row, actor_uid: str | None = None) -> EgressPolicy:
    """An egress_policies row (rules in canonical form); `actor_uid` overrides the row's."""
    return EgressPolicy(
        actor_uid=row["actor_uid"] if actor_uid is None else actor_uid,
        rules=rule_collection(row["rules"]),
        version=int(row["version"]),
    )


def worker_from_row(row: Row, *, atespace: str, state: str) -> Worker:
    """A workers row; holder_* names the Actor holding it."""
    holder = f"{row['holder_atespace']}/{row['holder_name']}" if row["holder_name"] is not None else None
    return Worker(name=row["name"], atespace=atespace, ip=row["ip"], actor=holder, state=state)
