"""Records of runtime/base.py <-> `ateapi` messages (proto/ateapi/ateapi.proto), both directions.

The server frame (`server.py`) encodes what a `Substrate` returns; the adapter (`client.py`) decodes
what a Substrate answers. Decoding never trusts the other side: a missing status, an enum number
this build does not know, an empty uid or name raise `UnexpectedShape` (a `SubstrateError` with
code INTERNAL and a message naming the field), so that the operation fails (and retries) with a
clear reason instead of crashing the worker.

sessionq-specific facts that `ateapi` has no field for travel as gRPC metadata (a real Substrate
ignores request headers it does not know, and sends no such trailers):

- request ``x-sessionq-expect-uid``: the Actor UID the caller recorded (the server applies it as a
  precondition: FAILED_PRECONDITION when the Actor of that name has another UID);
- request ``x-sessionq-actor-env``: the environment of a new Actor (JSON object of strings; never
  the workload credential, which travels with each turn: invoke.py);
- request ``x-sessionq-fidelity``: the snapshot fidelity a SuspendActor asks for (the template's
  preferred fidelity otherwise);
- response trailer ``x-sessionq-actor-uid``: the UID of the Actor a Tag or an EgressPolicy belongs to.

Worker labels carry the simulator's view of who holds a worker (`LABEL_*`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from google.protobuf.timestamp_pb2 import Timestamp

from sessionq._pb.ateapi import ateapi_pb2 as pb
from sessionq.runtime.base import (
    Actor,
    ActorState,
    ActorTemplate,
    Code,
    EgressPolicy,
    EgressRule,
    Snapshot,
    SnapshotFidelity,
    SnapshotStatus,
    SubstrateError,
    Tag,
    Worker,
)

EXPECT_UID = "x-sessionq-expect-uid"
ACTOR_ENV = "x-sessionq-actor-env"
FIDELITY = "x-sessionq-fidelity"
ACTOR_UID_TRAILER = "x-sessionq-actor-uid"

LABEL_ATESPACE = "sessionq.dev/atespace"
LABEL_HOLDER_ATESPACE = "sessionq.dev/holder-atespace"
LABEL_HOLDER_NAME = "sessionq.dev/holder-name"

EGRESS_POLICY_NAME = "default"
CONTAINER_NAME = "agent"
# the simulator's worker state names <-> ateapi.WorkerState
_WORKER_STATES = {"WORKER_STATE_READY": pb.WORKER_STATE_ACTIVE, "WORKER_STATE_DRAINING": pb.WORKER_STATE_DRAINING}
_WORKER_STATE_NAMES = {v: k for k, v in _WORKER_STATES.items()}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class UnexpectedShape(SubstrateError):
    """The runtime answered with a message this client cannot read."""

    def __init__(self, what: str) -> None:
        super().__init__(Code.INTERNAL, f"the runtime answered an unexpected shape: {what}")


# ----------------------------------------------------------------------------------------------
# scalars


def timestamp(value: datetime | None) -> Timestamp:
    """A Timestamp of an aware datetime (computed directly: protobuf's FromDatetime costs several
    times more, and this runs for every Actor on the wire)."""
    if value is None:
        return Timestamp()
    delta = value - _EPOCH
    return Timestamp(seconds=delta.days * 86400 + delta.seconds, nanos=delta.microseconds * 1000)


def from_timestamp(ts: Timestamp, has: bool) -> datetime:
    return _EPOCH + timedelta(seconds=ts.seconds, microseconds=ts.nanos // 1000) if has else _EPOCH


def _enum_name(enum: object, number: int, what: str) -> str:
    try:
        return str(enum.Name(number))  # type: ignore[attr-defined]
    except ValueError:
        raise UnexpectedShape(f"{what} has unknown enum number {number}") from None


def _require(value: str, what: str) -> str:
    if not value:
        raise UnexpectedShape(f"{what} is empty")
    return value


def ref(atespace: str, name: str) -> pb.ObjectRef:
    return pb.ObjectRef(atespace=atespace, name=name)


def split_template(template: str) -> pb.ObjectRef:
    atespace, sep, name = template.partition("/")
    if not sep or not atespace or not name or "/" in name:
        raise SubstrateError(Code.INVALID_ARGUMENT, f"template must be '<atespace>/<name>', got {template!r}")
    return ref(atespace, name)


# ----------------------------------------------------------------------------------------------
# actors and snapshots


# enum names -> numbers, looked up once (EnumTypeWrapper.Value is a slower call per field)
_ACTOR_STATE_NUMBERS = {name: number for name, number in pb.ActorState.items()}
_STORAGE_STATUS_NUMBERS = {name: number for name, number in pb.SnapshotStorageStatus.items()}
_FIDELITY_NUMBERS = {name: number for name, number in pb.SnapshotFidelity.items()}


def snapshot_to_pb(s: Snapshot) -> pb.Snapshot:
    storage = pb.SnapshotStorage(
        durability=pb.SNAPSHOT_DURABILITY_DURABLE,
        status=_STORAGE_STATUS_NUMBERS[s.status.value],
        fidelity=_FIDELITY_NUMBERS[s.fidelity.value],
        object=pb.ObjectSnapshot(snapshot_uri=s.uri or ""),
    )
    return pb.Snapshot(generation=s.generation, owner=pb.SNAPSHOT_OWNER_ACTOR, storage=[storage])


def snapshot_from_pb(s: pb.Snapshot, created_at: datetime, what: str) -> Snapshot:
    """The DURABLE copy of a generation (sessionq records only durable snapshots); a generation with
    only a LOCAL copy (a paused Actor) reads as in progress."""
    if s.generation < 1:
        raise UnexpectedShape(f"{what} has generation {s.generation}")
    durable = [st for st in s.storage if st.durability == pb.SNAPSHOT_DURABILITY_DURABLE]
    chosen = durable[0] if durable else (s.storage[0] if s.storage else None)
    if chosen is None:
        raise UnexpectedShape(f"{what} generation {s.generation} has no storage")
    fidelity = SnapshotFidelity(_enum_name(pb.SnapshotFidelity, chosen.fidelity, f"{what} fidelity"))
    status = SnapshotStatus(_enum_name(pb.SnapshotStorageStatus, chosen.status, f"{what} storage status"))
    if not durable:
        status = SnapshotStatus.IN_PROGRESS
    return Snapshot(
        generation=s.generation,
        fidelity=fidelity,
        status=status,
        uri=chosen.object.snapshot_uri if chosen.HasField("object") else "",
        created_at=created_at,
        size_bytes=None,  # ateapi's Snapshot has no size: unknown (the Session's usage counts it apart)
    )


def actor_to_pb(a: Actor) -> pb.Actor:
    status = pb.ActorStatus(
        state=_ACTOR_STATE_NUMBERS[a.state.value],
        snapshots=[snapshot_to_pb(s) for s in a.snapshots],
        last_assigned_generation=max((s.generation for s in a.snapshots), default=0),
    )
    if a.crash_message:
        status.crash.CopyFrom(pb.ActorCrash(message=a.crash_message[:4096], crash_time=timestamp(a.updated_at)))
    if a.worker is not None:
        status.worker_assignment.CopyFrom(
            pb.WorkerAssignment(worker=ref("", a.worker), worker_pod=a.worker,
                                worker_pod_ips=[a.worker_ip] if a.worker_ip else [])
        )
    tpl = split_template(a.template)
    return pb.Actor(
        metadata=pb.ResourceMetadata(
            atespace=a.atespace, name=a.name, uid=a.uid, version=a.version,
            create_time=timestamp(a.created_at), update_time=timestamp(a.updated_at),
        ),
        actor_template=tpl,
        status=status,
    )


def actor_from_pb(m: pb.Actor) -> Actor:
    if not m.HasField("metadata"):
        raise UnexpectedShape("Actor without metadata")
    md = m.metadata
    name = _require(md.name, "Actor metadata.name")
    what = f"Actor {md.atespace}/{name}"
    uid = _require(md.uid, f"{what} metadata.uid")
    if not m.HasField("status"):
        raise UnexpectedShape(f"{what} without status")
    state_name = _enum_name(pb.ActorState, m.status.state, f"{what} status.state")
    if m.status.state == pb.ACTOR_STATE_UNSPECIFIED:
        raise UnexpectedShape(f"{what} has status.state UNSPECIFIED")
    if not m.HasField("actor_template") or not m.actor_template.name:
        raise UnexpectedShape(f"{what} without actor_template")
    updated = from_timestamp(md.update_time, md.HasField("update_time"))
    worker: str | None = None
    worker_ip: str | None = None
    if m.status.HasField("worker_assignment"):
        wa = m.status.worker_assignment
        worker = wa.worker.name or wa.worker_pod or None
        worker_ip = wa.worker_pod_ips[0] if wa.worker_pod_ips else None
    snaps = sorted((snapshot_from_pb(s, updated, what) for s in m.status.snapshots), key=lambda s: s.generation)
    return Actor(
        atespace=md.atespace,
        name=name,
        uid=uid,
        template=f"{m.actor_template.atespace}/{m.actor_template.name}",
        state=ActorState(state_name),
        worker=worker,
        worker_ip=worker_ip,
        version=md.version,
        created_at=from_timestamp(md.create_time, md.HasField("create_time")),
        updated_at=updated,
        snapshots=tuple(snaps),
        crash_message=(m.status.crash.message or None) if m.status.HasField("crash") else None,
    )


# ----------------------------------------------------------------------------------------------
# templates


def template_to_pb(t: ActorTemplate, *, storage_location: str = "", sandbox_config: str = "") -> pb.ActorTemplate:
    return pb.ActorTemplate(
        metadata=pb.ResourceMetadata(atespace=t.atespace, name=t.name, uid=t.uid, version=t.version,
                                     create_time=timestamp(t.created_at), update_time=timestamp(t.created_at)),
        containers=[container(t.image, list(t.command), list(t.args), dict(t.env))],
        snapshot_config=pb.SnapshotConfig(storage_location=storage_location,
                                          preferred_fidelity=pb.SNAPSHOT_FIDELITY_VOLUMES),
        sandbox_config=pb.SandboxConfig(sandbox_class=pb.SANDBOX_CLASS_GVISOR, config_name=sandbox_config),
    )


def container(
    image: str, command: list[str] | None = None, args: list[str] | None = None, env: dict[str, str] | None = None
) -> pb.Container:
    """The template's one container: its image, and what it runs (argv is command then args) with
    which environment (the Agent spec's command, args and env)."""
    return pb.Container(
        name=CONTAINER_NAME,
        image=image,
        command=list(command or []),
        args=list(args or []),
        env=[pb.EnvVar(name=k, value=v) for k, v in sorted((env or {}).items())],
    )


def template_from_pb(m: pb.ActorTemplate) -> ActorTemplate:
    md = m.metadata
    name = _require(md.name, "ActorTemplate metadata.name")
    what = f"ActorTemplate {md.atespace}/{name}"
    if not m.containers:
        raise UnexpectedShape(f"{what} has no container")
    return ActorTemplate(
        atespace=md.atespace,
        name=name,
        uid=_require(md.uid, f"{what} metadata.uid"),
        image=m.containers[0].image,
        version=md.version,
        created_at=from_timestamp(md.create_time, md.HasField("create_time")),
        command=tuple(m.containers[0].command),
        args=tuple(m.containers[0].args),
        env={e.name: e.value for e in m.containers[0].env},
    )


# ----------------------------------------------------------------------------------------------
# egress


def _ports(port: int) -> pb.Ports:
    return pb.Ports(numbers=[port])


def rule_to_pb(r: EgressRule) -> pb.EgressRule:
    effects = None
    if r.credential_headers:
        effects = pb.HttpRuleEffects(replace_headers=[
            pb.CredentialHeader(header=h, credential_uri=v) for h, v in sorted(r.credential_headers.items())
        ])
    if r.protocol == "http":
        return pb.EgressRule(http=pb.HTTPRule(hostnames=[r.hostname], ports=_ports(r.port), effects=effects))
    if r.protocol == "https":
        return pb.EgressRule(https=pb.HTTPSRule(hostnames=[r.hostname], ports=_ports(r.port), effects=effects))
    if r.protocol == "tls_passthrough":
        return pb.EgressRule(tls_passthrough=pb.TLSPassthroughRule(hostnames=[r.hostname], ports=_ports(r.port)))
    raise SubstrateError(Code.INVALID_ARGUMENT, f"unsupported egress protocol {r.protocol!r}")


_DEFAULT_PORTS = {"http": 80, "https": 443}


def rules_from_pb(m: pb.EgressRule) -> list[EgressRule]:
    """One ateapi rule (several hostnames and ports) as sessionq's one-destination rules."""
    # no proto oneof: the members are plain fields, and the rule is ours to check
    set_members = [f for f in ("http", "https", "tls_passthrough") if m.HasField(f)]
    if len(set_members) != 1:
        raise UnexpectedShape(f"EgressRule with {len(set_members)} protocols set (exactly one expected)")
    protocol = set_members[0]
    body = getattr(m, protocol)
    if body.ports.HasField("all"):
        raise UnexpectedShape(f"{protocol} egress rule for all ports (sessionq names one port per rule)")
    ports = list(body.ports.numbers) or ([_DEFAULT_PORTS[protocol]] if protocol in _DEFAULT_PORTS else [])
    if not ports or not body.hostnames:
        raise UnexpectedShape(f"{protocol} egress rule without hostnames or ports")
    headers: dict[str, str] = {}
    if protocol != "tls_passthrough" and body.HasField("effects"):
        headers = {h.header: h.credential_uri for h in body.effects.replace_headers}
    return [EgressRule(protocol, host, int(port), dict(headers)) for host in body.hostnames for port in ports]


def policy_to_pb(atespace: str, p: EgressPolicy) -> pb.EgressPolicy:
    return pb.EgressPolicy(
        metadata=pb.ResourceMetadata(atespace=atespace, name=EGRESS_POLICY_NAME, version=p.version),
        rules=[rule_to_pb(r) for r in p.rules],
    )


def policy_from_pb(m: pb.EgressPolicy, actor_uid: str) -> EgressPolicy:
    rules = [r for rule in m.rules for r in rules_from_pb(rule)]
    try:
        collection: frozenset[EgressRule] | tuple[EgressRule, ...] = frozenset(rules)
    except TypeError:  # rules with credential headers hold a dict (see runtime/base.py)
        collection = tuple(rules)
    return EgressPolicy(actor_uid=actor_uid, rules=collection, version=m.metadata.version)


# ----------------------------------------------------------------------------------------------
# tags


def tag_to_pb(t: Tag) -> pb.Tag:
    snap = pb.Snapshot(
        generation=t.snapshot_generation,
        owner=pb.SNAPSHOT_OWNER_TAG,
        actor_template_uid=t.template_uid,
        storage=[pb.SnapshotStorage(durability=pb.SNAPSHOT_DURABILITY_DURABLE,
                                    status=pb.SnapshotStorageStatus.Value(SnapshotStatus(t.status).value),
                                    fidelity=pb.SNAPSHOT_FIDELITY_VOLUMES,
                                    object=pb.ObjectSnapshot(snapshot_uri=t.snapshot_uri))],
    )
    return pb.Tag(
        metadata=pb.ResourceMetadata(atespace=t.atespace, name=t.name, version=1,
                                     create_time=timestamp(t.created_at), update_time=timestamp(t.created_at)),
        scope=pb.TAG_SCOPE_ATESPACE,
        source_actor=ref(t.atespace, t.actor_name),
        status=pb.TagStatus(snapshot=snap, actor_template_uid=t.template_uid),
    )


def tag_from_pb(m: pb.Tag, actor_uid: str) -> Tag:
    md = m.metadata
    name = _require(md.name, "Tag metadata.name")
    what = f"Tag {md.atespace}/{name}"
    if not m.HasField("status") or not m.status.HasField("snapshot"):
        raise UnexpectedShape(f"{what} without status.snapshot")
    created = from_timestamp(md.create_time, md.HasField("create_time"))
    snap = snapshot_from_pb(m.status.snapshot, created, what)
    return Tag(
        atespace=md.atespace,
        name=name,
        actor_name=m.source_actor.name,
        actor_uid=actor_uid,
        snapshot_generation=snap.generation,
        snapshot_uri=snap.uri,
        created_at=created,
        template_uid=m.status.actor_template_uid or m.status.snapshot.actor_template_uid,
        status=snap.status,
    )


# ----------------------------------------------------------------------------------------------
# workers


def worker_to_pb(w: Worker) -> pb.Worker:
    labels = {LABEL_ATESPACE: w.atespace}
    if w.actor is not None:
        holder_atespace, _, holder_name = w.actor.partition("/")
        labels[LABEL_HOLDER_ATESPACE] = holder_atespace
        labels[LABEL_HOLDER_NAME] = holder_name
    return pb.Worker(
        metadata=pb.ResourceMetadata(name=w.name, version=1),
        worker_pod=w.name,
        ips=[w.ip] if w.ip else [],
        labels=labels,
        status=pb.WorkerStatus(state=_WORKER_STATES.get(w.state, pb.WORKER_STATE_ACTIVE)),
    )


def worker_from_pb(m: pb.Worker) -> Worker:
    name = _require(m.metadata.name, "Worker metadata.name")
    state = m.status.state
    _enum_name(pb.WorkerState, state, f"Worker {name} status.state")
    holder = None
    if m.labels.get(LABEL_HOLDER_NAME):
        holder = f"{m.labels.get(LABEL_HOLDER_ATESPACE, '')}/{m.labels[LABEL_HOLDER_NAME]}"
    return Worker(
        name=name,
        atespace=m.labels.get(LABEL_ATESPACE, ""),
        ip=m.ips[0] if m.ips else "",
        actor=holder,
        state=_WORKER_STATE_NAMES.get(state, pb.WorkerState.Name(state)),
    )
