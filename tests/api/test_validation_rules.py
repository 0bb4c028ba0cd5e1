"""Every buf.validate rule of docs/kagent-validation.md, broken on purpose over a real gRPC channel:
INVALID_ARGUMENT whose details carry buf.validate.Violations (upstream's detail) and a
google.rpc.BadRequest, each naming exactly the rule ids and field paths the facts describe; the
status message names the first violation in plain words; nothing reaches the database (issue 20)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import grpc
import pytest
from a2a.types import a2a_pb2
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2, status_pb2
from lifecycle import count

from sessionq._pb.buf.validate import validate_pb2
from sessionq._pb.kagent.api.v1alpha1 import (
    agents_pb2,
    agents_pb2_grpc,
    checkpoints_pb2,
    checkpoints_pb2_grpc,
    common_pb2,
    sandboxes_pb2,
    sandboxes_pb2_grpc,
    sessions_pb2,
    sessions_pb2_grpc,
    task_store_pb2,
    task_store_pb2_grpc,
)
from sessionq.api.validation import field_path

pytestmark = pytest.mark.pooler  # also run through PgBouncer (make test-pooler)

U = "0190b2c4-8f5e-7a10-9b2d-3c4d5e6f7a8b"
REF = common_pb2.ResourceReference(namespace="kagent", name="my-first-agent")
EMPTY_REF = {("string.min_len", "{0}.namespace"), ("string.pattern", "{0}.namespace"),
             ("string.min_len", "{0}.name"), ("string.pattern", "{0}.name")}
S, C, T, A, X = "sessions", "checkpoints", "task_store", "agents", "sandboxes"
STUBS = {S: sessions_pb2_grpc.SessionServiceStub, C: checkpoints_pb2_grpc.CheckpointServiceStub,
         T: task_store_pb2_grpc.TaskStoreServiceStub, A: agents_pb2_grpc.AgentServiceStub,
         X: sandboxes_pb2_grpc.SandboxServiceStub}


def ref_rules(at: str) -> set[tuple[str, str]]:
    return {(r, p.format(at)) for r, p in EMPTY_REF}


def snap(**kw: Any) -> sessions_pb2.SessionVolumeSnapshot:
    return sessions_pb2.SessionVolumeSnapshot(**{"csi_driver": "ebs.csi.aws.com", "snapshot_handle": "snap-1", **kw})


def vol(**kw: Any) -> sessions_pb2.SessionVolumeSource:
    return sessions_pb2.SessionVolumeSource(**{"snapshot": snap(), "capacity": "20Gi", **kw})


def create_session(**kw: Any) -> sessions_pb2.CreateSessionRequest:
    return sessions_pb2.CreateSessionRequest(**{"request_id": "r1", "agent": REF, **kw})


def task(**kw: Any) -> a2a_pb2.Task:
    return a2a_pb2.Task(**{"id": "t1", "context_id": U, **kw})


def dur(seconds: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=seconds)


# (service, rpc, request, {(rule id, field path)}): one row per rule of the facts
CASES: list[tuple[str, str, Any, set[tuple[str, str]]]] = [
    # SessionService (docs §4.1) and the newer fields (§5)
    (S, "CreateSession", sessions_pb2.CreateSessionRequest(request_id="r1"), {("required", "agent")}),
    (S, "CreateSession", create_session(agent=common_pb2.ResourceReference()), ref_rules("agent")),
    (S, "CreateSession", create_session(request_id=""), {("string.min_len", "request_id")}),
    (S, "CreateSession", create_session(request_id="r" * 129), {("string.max_len", "request_id")}),
    (S, "CreateSession", create_session(name=" lead"), {("string.pattern", "name")}),
    (S, "CreateSession", create_session(name="a\tb"), {("string.pattern", "name")}),
    (S, "CreateSession", create_session(name="n" * 201), {("string.max_len", "name")}),
    (S, "CreateSession", create_session(agent=common_pb2.ResourceReference(namespace="Kagent", name="a")),
     {("string.pattern", "agent.namespace")}),
    (S, "CreateSession", create_session(agent=common_pb2.ResourceReference(namespace="k" * 64, name="a")),
     {("string.max_len", "agent.namespace")}),
    (S, "CreateSession", create_session(agent=common_pb2.ResourceReference(namespace="kagent", name="a_b")),
     {("string.pattern", "agent.name")}),
    (S, "CreateSession", create_session(agent=common_pb2.ResourceReference(namespace="kagent", name="a" * 254)),
     {("string.max_len", "agent.name")}),
    (S, "CreateSession", create_session(volume_source=sessions_pb2.SessionVolumeSource()),
     {("required", "volume_source.snapshot"), ("string.min_len", "volume_source.capacity"),
      ("string.pattern", "volume_source.capacity")}),
    (S, "CreateSession", create_session(volume_source=vol(capacity="20K")), {("string.pattern", "volume_source.capacity")}),
    (S, "CreateSession", create_session(volume_source=vol(capacity="1" * 33)), {("string.max_len", "volume_source.capacity")}),
    (S, "CreateSession", create_session(volume_source=vol(storage_class="Fast_SSD")),
     {("string.pattern", "volume_source.storage_class")}),
    (S, "CreateSession", create_session(volume_source=vol(storage_class="s" * 254)),
     {("string.max_len", "volume_source.storage_class")}),
    (S, "CreateSession", create_session(volume_source=vol(snapshot=snap(csi_driver=""))),
     {("string.min_len", "volume_source.snapshot.csi_driver"), ("string.pattern", "volume_source.snapshot.csi_driver")}),
    (S, "CreateSession", create_session(volume_source=vol(snapshot=snap(csi_driver="d" * 64))),
     {("string.max_len", "volume_source.snapshot.csi_driver")}),
    (S, "CreateSession", create_session(volume_source=vol(snapshot=snap(snapshot_handle=""))),
     {("string.min_len", "volume_source.snapshot.snapshot_handle"),
      ("string.pattern", "volume_source.snapshot.snapshot_handle")}),
    (S, "CreateSession", create_session(volume_source=vol(snapshot=snap(snapshot_handle="a b"))),
     {("string.pattern", "volume_source.snapshot.snapshot_handle")}),
    (S, "CreateSession", create_session(volume_source=vol(snapshot=snap(snapshot_handle="h" * 1025))),
     {("string.max_len", "volume_source.snapshot.snapshot_handle")}),
    (S, "CreateSession", create_session(admission_token="a b"), {("string.pattern", "admission_token")}),
    (S, "CreateSession", create_session(admission_token="t" * 16385), {("string.max_len", "admission_token")}),
    (S, "GetSession", sessions_pb2.GetSessionRequest(), {("string.uuid_empty", "session_id")}),
    (S, "GetSession", sessions_pb2.GetSessionRequest(session_id=U.replace("-", "")), {("string.uuid", "session_id")}),
    (S, "ListSessions", sessions_pb2.ListSessionsRequest(agent=common_pb2.ResourceReference()), ref_rules("agent")),
    (S, "ListSessions", sessions_pb2.ListSessionsRequest(page=common_pb2.PageRequest(limit=101)),
     {("int32.gte_lte", "page.limit")}),
    (S, "ListSessions", sessions_pb2.ListSessionsRequest(page=common_pb2.PageRequest(limit=-1)),
     {("int32.gte_lte", "page.limit")}),
    (S, "ListSessions", sessions_pb2.ListSessionsRequest(page=common_pb2.PageRequest(offset=-1)),
     {("int32.gte", "page.offset")}),
    (S, "UpdateSessionName", sessions_pb2.UpdateSessionNameRequest(session_id="x"), {("string.uuid", "session_id")}),
    (S, "UpdateSessionName", sessions_pb2.UpdateSessionNameRequest(session_id=U, name="trail "),
     {("string.pattern", "name")}),
    (S, "UpdateSessionName", sessions_pb2.UpdateSessionNameRequest(session_id=U, name="n" * 201),
     {("string.max_len", "name")}),
    (S, "SuspendSession", sessions_pb2.SuspendSessionRequest(session_id="x"), {("string.uuid", "session_id")}),
    (S, "ResumeSession", sessions_pb2.ResumeSessionRequest(), {("string.uuid_empty", "session_id")}),
    (S, "DeleteSession", sessions_pb2.DeleteSessionRequest(session_id="x"), {("string.uuid", "session_id")}),
    (S, "CreateSessionShare", sessions_pb2.CreateSessionShareRequest(session_id="x", permission=1),
     {("string.uuid", "session_id")}),
    (S, "CreateSessionShare", sessions_pb2.CreateSessionShareRequest(session_id=U), {("enum.not_in", "permission")}),
    (S, "CreateSessionShare", sessions_pb2.CreateSessionShareRequest(session_id=U, permission=7),
     {("enum.defined_only", "permission")}),
    (S, "CreateSessionShare", sessions_pb2.CreateSessionShareRequest(session_id=U, permission=1, ttl=dur(0)),
     {("duration.gt", "ttl")}),
    (S, "CreateSessionShare", sessions_pb2.CreateSessionShareRequest(session_id=U, permission=2, ttl=dur(-5)),
     {("duration.gt", "ttl")}),
    (S, "ListSessionShares", sessions_pb2.ListSessionSharesRequest(session_id="x"), {("string.uuid", "session_id")}),
    (S, "ListSessionShares", sessions_pb2.ListSessionSharesRequest(session_id=U, page=common_pb2.PageRequest(limit=500)),
     {("int32.gte_lte", "page.limit")}),
    (S, "RevokeSessionShare", sessions_pb2.RevokeSessionShareRequest(), {("string.uuid_empty", "share_id")}),
    # CheckpointService (§4.2)
    (C, "CreateCheckpoint", checkpoints_pb2.CreateCheckpointRequest(request_id="r", expected_head_task_id="t"),
     {("string.uuid_empty", "session_id")}),
    (C, "CreateCheckpoint", checkpoints_pb2.CreateCheckpointRequest(session_id=U, expected_head_task_id="t"),
     {("string.min_len", "request_id")}),
    (C, "CreateCheckpoint", checkpoints_pb2.CreateCheckpointRequest(session_id=U, request_id="r" * 129,
                                                                    expected_head_task_id="t"),
     {("string.max_len", "request_id")}),
    (C, "CreateCheckpoint", checkpoints_pb2.CreateCheckpointRequest(session_id=U, request_id="r"),
     {("string.min_len", "expected_head_task_id")}),
    (C, "GetCheckpoint", checkpoints_pb2.GetCheckpointRequest(checkpoint_id="x"), {("string.uuid", "checkpoint_id")}),
    (C, "ListCheckpoints", checkpoints_pb2.ListCheckpointsRequest(), {("string.uuid_empty", "session_id")}),
    (C, "ListCheckpoints", checkpoints_pb2.ListCheckpointsRequest(session_id=U, page=common_pb2.PageRequest(limit=101)),
     {("int32.gte_lte", "page.limit")}),
    (C, "DeleteCheckpoint", checkpoints_pb2.DeleteCheckpointRequest(checkpoint_id="x"), {("string.uuid", "checkpoint_id")}),
    (C, "ForkSession", checkpoints_pb2.ForkSessionRequest(request_id="r"), {("string.uuid_empty", "checkpoint_id")}),
    (C, "ForkSession", checkpoints_pb2.ForkSessionRequest(checkpoint_id=U), {("string.min_len", "request_id")}),
    (C, "ForkSession", checkpoints_pb2.ForkSessionRequest(checkpoint_id=U, request_id="r" * 129),
     {("string.max_len", "request_id")}),
    (C, "UpdateCheckpointName", checkpoints_pb2.UpdateCheckpointNameRequest(checkpoint_id="x"),
     {("string.uuid", "checkpoint_id")}),
    (C, "UpdateCheckpointName", checkpoints_pb2.UpdateCheckpointNameRequest(checkpoint_id=U, name=" x"),
     {("string.pattern", "name")}),
    (C, "UpdateCheckpointName", checkpoints_pb2.UpdateCheckpointNameRequest(checkpoint_id=U, name="n" * 201),
     {("string.max_len", "name")}),
    # TaskStoreService (§4.3), CEL message rules included
    (T, "CreateTask", task_store_pb2.TaskStoreServiceCreateTaskRequest(session_id="x", task=task()),
     {("string.uuid", "session_id")}),
    (T, "CreateTask", task_store_pb2.TaskStoreServiceCreateTaskRequest(session_id=U),
     {("required", "task"), ("task_store.create_identity", "")}),
    (T, "CreateTask", task_store_pb2.TaskStoreServiceCreateTaskRequest(session_id=U, task=task(context_id="")),
     {("task_store.create_identity", "")}),
    (T, "CreateTask", task_store_pb2.TaskStoreServiceCreateTaskRequest(session_id=U, task=task(id="")),
     {("task_store.create_identity", "")}),
    (T, "CreateTask", task_store_pb2.TaskStoreServiceCreateTaskRequest(session_id=U, task=task(), dispatch_id=""),
     {("string.uuid_empty", "dispatch_id")}),
    (T, "GetTask", task_store_pb2.TaskStoreServiceGetTaskRequest(session_id=U), {("string.min_len", "task_id")}),
    (T, "GetTask", task_store_pb2.TaskStoreServiceGetTaskRequest(task_id="t"), {("string.uuid_empty", "session_id")}),
    (T, "UpdateTask", task_store_pb2.TaskStoreServiceUpdateTaskRequest(session_id=U, task=task()),
     {("int64.gt", "expected_version")}),
    (T, "UpdateTask", task_store_pb2.TaskStoreServiceUpdateTaskRequest(session_id=U, expected_version=1),
     {("required", "task"), ("task_store.task_identity", "")}),
    (T, "UpdateTask", task_store_pb2.TaskStoreServiceUpdateTaskRequest(session_id=U, expected_version=1,
                                                                       task=task(context_id="")),
     {("task_store.task_identity", "")}),
    (T, "UpdateTask", task_store_pb2.TaskStoreServiceUpdateTaskRequest(session_id=U, expected_version=1, task=task(),
                                                                       dispatch_id="x"),
     {("string.uuid", "dispatch_id")}),
    (T, "UpdateTask", task_store_pb2.TaskStoreServiceUpdateTaskRequest(session_id="x", expected_version=1, task=task()),
     {("string.uuid", "session_id")}),
    (T, "ListTasks", task_store_pb2.TaskStoreServiceListTasksRequest(session_id=U), {("required", "request")}),
    (T, "ListTasks", task_store_pb2.TaskStoreServiceListTasksRequest(request=a2a_pb2.ListTasksRequest()),
     {("string.uuid_empty", "session_id")}),
    (T, "SettleTask", task_store_pb2.TaskStoreServiceSettleTaskRequest(session_id=U, version=1),
     {("string.min_len", "task_id")}),
    (T, "SettleTask", task_store_pb2.TaskStoreServiceSettleTaskRequest(session_id=U, task_id="t"),
     {("int64.gt", "version")}),
    (T, "SettleTask", task_store_pb2.TaskStoreServiceSettleTaskRequest(task_id="t", version=1),
     {("string.uuid_empty", "session_id")}),
    # AgentService (§2)
    (A, "ListAgents", agents_pb2.ListAgentsRequest(), {("string.min_len", "namespace"), ("string.pattern", "namespace")}),
    (A, "ListAgents", agents_pb2.ListAgentsRequest(namespace="Team"), {("string.pattern", "namespace")}),
    (A, "ListAgents", agents_pb2.ListAgentsRequest(namespace="n" * 64), {("string.max_len", "namespace")}),
    (A, "GetAgent", agents_pb2.GetAgentRequest(), {("required", "ref")}),
    (A, "GetAgent", agents_pb2.GetAgentRequest(ref=common_pb2.ResourceReference()), ref_rules("ref")),
    (A, "CreateAgent", agents_pb2.CreateAgentRequest(), {("required", "ref"), ("required", "resource")}),
    (A, "CreateAgent", agents_pb2.CreateAgentRequest(ref=REF), {("required", "resource")}),
    (A, "UpdateAgent", agents_pb2.UpdateAgentRequest(resource=common_pb2.StructuredObject()), {("required", "ref")}),
    (A, "UpdateAgent", agents_pb2.UpdateAgentRequest(ref=REF), {("required", "resource")}),
    (A, "UpdateAgent", agents_pb2.UpdateAgentRequest(ref=common_pb2.ResourceReference(namespace="kagent", name="A"),
                                                     resource=common_pb2.StructuredObject()),
     {("string.pattern", "ref.name")}),
    (A, "DeleteAgent", agents_pb2.DeleteAgentRequest(), {("required", "ref")}),
    # SandboxService (§3)
    (X, "CreateSandbox", sandboxes_pb2.CreateSandboxRequest(request_id="r"), {("required", "sandbox_template")}),
    (X, "CreateSandbox", sandboxes_pb2.CreateSandboxRequest(request_id="r", sandbox_template=common_pb2.ResourceReference()),
     ref_rules("sandbox_template")),
    (X, "CreateSandbox", sandboxes_pb2.CreateSandboxRequest(sandbox_template=REF), {("string.min_len", "request_id")}),
    (X, "CreateSandbox", sandboxes_pb2.CreateSandboxRequest(sandbox_template=REF, request_id="r" * 129),
     {("string.max_len", "request_id")}),
    (X, "CreateSandbox", sandboxes_pb2.CreateSandboxRequest(sandbox_template=REF, request_id="r", name="n" * 201),
     {("string.max_len", "name")}),
    (X, "CreateSandbox", sandboxes_pb2.CreateSandboxRequest(sandbox_template=REF, request_id="r", ttl=dur(0)),
     {("duration.gte_lte", "ttl")}),
    (X, "CreateSandbox", sandboxes_pb2.CreateSandboxRequest(sandbox_template=REF, request_id="r", ttl=dur(86401)),
     {("duration.gte_lte", "ttl")}),
    (X, "GetSandbox", sandboxes_pb2.GetSandboxRequest(), {("string.uuid_empty", "sandbox_id")}),
    (X, "ListSandboxes", sandboxes_pb2.ListSandboxesRequest(sandbox_template=common_pb2.ResourceReference()),
     ref_rules("sandbox_template")),
    (X, "ListSandboxes", sandboxes_pb2.ListSandboxesRequest(page=common_pb2.PageRequest(limit=101)),
     {("int32.gte_lte", "page.limit")}),
    (X, "SuspendSandbox", sandboxes_pb2.SuspendSandboxRequest(sandbox_id="x"), {("string.uuid", "sandbox_id")}),
    (X, "ResumeSandbox", sandboxes_pb2.ResumeSandboxRequest(sandbox_id="x"), {("string.uuid", "sandbox_id")}),
    (X, "DeleteSandbox", sandboxes_pb2.DeleteSandboxRequest(sandbox_id="x"), {("string.uuid", "sandbox_id")}),
]


def details(e: grpc.aio.AioRpcError) -> tuple[validate_pb2.Violations, error_details_pb2.BadRequest]:
    raw = dict(e.trailing_metadata() or ())["grpc-status-details-bin"]
    status = status_pb2.Status.FromString(raw)
    assert status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    violations, bad = validate_pb2.Violations(), error_details_pb2.BadRequest()
    assert status.details[0].Unpack(violations) and status.details[1].Unpack(bad)
    return violations, bad


async def test_every_rule_is_enforced_before_the_servicer(api, store):
    """One call per rule; each answers the rule ids and field paths of the facts, in both details."""
    stubs = {k: f(api.channel) for k, f in STUBS.items()}
    problems = []
    for service, rpc, request, expected in CASES:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await getattr(stubs[service], rpc)(request, metadata=api.md(), timeout=10)
        where = f"{service}.{rpc}({request})"[:160]
        if e.value.code() != grpc.StatusCode.INVALID_ARGUMENT:
            problems.append(f"{where}: {e.value.code()} {e.value.details()}")
            continue
        violations, bad = details(e.value)
        got = {(v.rule_id, field_path(v)) for v in violations.violations}
        if got != expected:
            problems.append(f"{where}: {sorted(got)} != {sorted(expected)}")
        bad_got = {(f.description.split(":", 1)[0], f.field) for f in bad.field_violations}
        if bad_got != expected:
            problems.append(f"{where}: BadRequest {sorted(bad_got)}")
        message = e.value.details() or ""
        if not message.startswith("invalid request: ") or len(message) > 400 or "n" * 100 in message:
            problems.append(f"{where}: message {message[:200]!r}")
    assert not problems, "\n".join(problems)
    # nothing reached the database
    assert await count(store, "SELECT count(*) FROM sessionq.sessions") == 0
    assert await count(store, "SELECT count(*) FROM sessionq.agents") == 0


@pytest.mark.parametrize(("request_", "says"), [
    (sessions_pb2.GetSessionRequest(), "invalid request: session_id is required (a UUID)"),
    (sessions_pb2.GetSessionRequest(session_id="nope"), "invalid request: session_id must be a UUID"),
    (create_session(agent=common_pb2.ResourceReference(namespace="Kagent", name="a")),
     "invalid request: agent.namespace must be a DNS label"),
    (create_session(name=" padded"), "invalid request: name must not start or end with a space"),
    (create_session(agent=common_pb2.ResourceReference()),
     "invalid request: agent.namespace must be at least 1 characters (and 3 more violations"),
])
async def test_the_message_names_the_first_violation_in_plain_words(api, request_, says):
    stub = sessions_pb2_grpc.SessionServiceStub(api.channel)
    call = stub.GetSession if isinstance(request_, sessions_pb2.GetSessionRequest) else stub.CreateSession
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await call(request_, metadata=api.md(), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (e.value.details() or "").startswith(says), e.value.details()


async def test_bug_reports_of_the_issue(api):
    """The four trips of the issue: GetTask with an empty task id, ListTasks without request,
    CreateTask/UpdateTask without context_id answer INVALID_ARGUMENT (before any credential check)."""
    ts = task_store_pb2_grpc.TaskStoreServiceStub(api.channel)
    for call in (
        ts.GetTask(task_store_pb2.TaskStoreServiceGetTaskRequest(session_id=U, task_id=""), timeout=5),
        ts.ListTasks(task_store_pb2.TaskStoreServiceListTasksRequest(session_id=U), timeout=5),
        ts.CreateTask(task_store_pb2.TaskStoreServiceCreateTaskRequest(session_id=U, task=a2a_pb2.Task(id="t")),
                      timeout=5),
        ts.UpdateTask(task_store_pb2.TaskStoreServiceUpdateTaskRequest(session_id=U, task=a2a_pb2.Task(id="t"),
                                                                       expected_version=1), timeout=5),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await call
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()


async def test_a_valid_sandbox_call_reaches_the_service(api):
    stub = sandboxes_pb2_grpc.SandboxServiceStub(api.channel)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stub.GetSandbox(sandboxes_pb2.GetSandboxRequest(sandbox_id=U), metadata=api.md(), timeout=5)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND  # past the validator: no such sandbox


# -- every rule of the facts has a row in CASES --------------------------------------------------

FACTS = Path(__file__).resolve().parents[2] / "docs" / "kagent-validation.md"
# a reported rule id -> the declared rules it stands for (docs §6)
REPORTED_AS = {
    "string.uuid_empty": {"string.uuid"},
    "duration.gte_lte": {"duration.gte", "duration.lte"},
    "int32.gte_lte": {"int32.gte", "int32.lte"},
}
# a pair of bounds is reported once, for whichever side is broken: a row breaks one side, so rows
# breaking each side are needed (the table has them) but a row counts for the side it breaks
LOWER_OR_UPPER = {"duration.gte_lte", "int32.gte_lte"}


def declared_rules() -> set[tuple[str, str, str]]:
    """(message, field, rule) of every field rule, and (message, "", CEL id) of every message rule,
    that docs/kagent-validation.md declares."""
    text = FACTS.read_text()
    out: set[tuple[str, str, str]] = set()
    for m in re.finditer(r"^- `(\w+)\.(\w+)` \([^)]*\): (.*?)(?=^- |^\n|\Z)", text, re.M | re.S):
        message, field, body = m.groups()
        for rule in re.findall(r"`((?:string|int32|int64|duration|enum)\.\w+|required) = ", body):
            out.add((message, field, rule))
    for m in re.finditer(r"^- Message rule on `(\w+)` \(CEL\):\n\s+- id `([\w.]+)`", text, re.M):
        out.add((m.group(1), "", m.group(2)))
    return out


def covered_rules() -> set[tuple[str, str, str]]:
    """(message, field, rule) that some row of CASES breaks, the field path walked from the request
    to the message that declares the field (agent.namespace -> ResourceReference.namespace)."""
    out: set[tuple[str, str, str]] = set()
    for _service, _rpc, request, expected in CASES:
        for rule_id, path in expected:
            descriptor = request.DESCRIPTOR
            if not path:
                out.add((descriptor.name, "", rule_id))
                continue
            *parents, leaf = path.split(".")
            for part in parents:
                descriptor = descriptor.fields_by_name[part].message_type
            rules = REPORTED_AS.get(rule_id, {rule_id})
            if rule_id in LOWER_OR_UPPER:  # which side this row breaks
                value = request
                for part in path.split("."):
                    value = getattr(value, part)
                number = value.seconds if hasattr(value, "seconds") else value
                rules = {r for r in rules if r.endswith(".gte") == (number < 1)}
            out |= {(descriptor.name, leaf, r) for r in rules}
    return out


def test_the_rules_of_the_facts_were_read() -> None:
    rules = declared_rules()
    assert len(rules) > 60
    assert ("ResourceReference", "name", "string.max_len") in rules
    assert ("CreateSandboxRequest", "ttl", "duration.lte") in rules
    assert ("TaskStoreServiceUpdateTaskRequest", "", "task_store.task_identity") in rules
    assert ("SessionVolumeSnapshot", "snapshot_handle", "string.pattern") in rules


def test_every_rule_of_the_facts_has_a_bad_input_case() -> None:
    """A rule the facts declare but no row of CASES breaks is a rule nobody checked."""
    missing = declared_rules() - covered_rules()
    assert not missing, "rules without a bad-input case:\n" + "\n".join(map(str, sorted(missing)))
