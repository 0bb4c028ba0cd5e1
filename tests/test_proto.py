"""The generated protobuf modules: up to date, wire-compatible with docs/wire.md, and
importable next to the a2a-sdk's own `lf.a2a.v1` module."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FieldDescriptor as FD

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

from sessionq._pb.kagent.api.v1alpha1 import (  # noqa: E402
    agents_pb2,
    checkpoints_pb2,
    common_pb2,
    runtime_pb2,
    sessions_pb2,
    task_store_pb2,
)
from sessionq._pb.sessionq.v1 import inventory_pb2  # noqa: E402

PKG = "kagent.api.v1alpha1"

STR, BOOL, I32, I64, U64 = FD.TYPE_STRING, FD.TYPE_BOOL, FD.TYPE_INT32, FD.TYPE_INT64, FD.TYPE_UINT64
ENUM, MSG = FD.TYPE_ENUM, FD.TYPE_MESSAGE


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", "")) if p)
    return env


def _fields(message_cls: Any) -> dict[int, tuple[str, int, str | None, bool]]:
    """number -> (name, type, message/enum full name or None, repeated)."""
    out: dict[int, tuple[str, int, str | None, bool]] = {}
    for f in message_cls.DESCRIPTOR.fields:
        ref = None
        if f.type == MSG:
            ref = f.message_type.full_name
        elif f.type == ENUM:
            ref = f.enum_type.full_name
        repeated = bool(f.is_repeated)
        out[f.number] = (f.name, f.type, ref, repeated)
    return out


def _check(message_cls: Any, expected: dict[int, tuple[Any, ...]]) -> None:
    """expected: number -> (name, type[, ref[, repeated]])."""
    norm: dict[int, tuple[str, int, str | None, bool]] = {}
    for number, spec in expected.items():
        name, typ, *rest = spec
        ref = rest[0] if rest else None
        repeated = rest[1] if len(rest) > 1 else False
        norm[number] = (name, typ, ref, repeated)
    assert _fields(message_cls) == norm, message_cls.DESCRIPTOR.full_name


def _enum(enum_wrapper: Any) -> dict[str, int]:
    return {v.name: v.number for v in enum_wrapper.DESCRIPTOR.values}


# --- (1) generated code is up to date -------------------------------------------------------


def test_generated_code_is_up_to_date() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_proto.py"), "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- (2) wire facts -------------------------------------------------------------------------


def test_file_package_and_paths() -> None:
    # upstream's file names: reflection describes the files a kagent client was built from
    for mod, name in [
        (common_pb2, "common"),
        (runtime_pb2, "runtime"),
        (sessions_pb2, "sessions"),
        (checkpoints_pb2, "checkpoints"),
        (task_store_pb2, "task_store"),
        (agents_pb2, "agents"),
    ]:
        assert mod.DESCRIPTOR.package == PKG
        assert mod.DESCRIPTOR.name == f"kagent/api/v1alpha1/{name}.proto"
        assert mod.__name__ == f"sessionq._pb.kagent.api.v1alpha1.{name}_pb2"
    # sessionq's own services are in sessionq's own package
    assert inventory_pb2.DESCRIPTOR.package == "sessionq.v1"
    assert inventory_pb2.DESCRIPTOR.name == "sessionq/v1/inventory.proto"
    assert [d.name for d in task_store_pb2.DESCRIPTOR.dependencies] == ["a2a.proto"]


def test_enums() -> None:
    assert _enum(runtime_pb2.RuntimeState) == {
        "RUNTIME_STATE_UNSPECIFIED": 0,
        "RUNTIME_STATE_CREATING": 1,
        "RUNTIME_STATE_READY": 2,
        "RUNTIME_STATE_SUSPENDED": 3,
        "RUNTIME_STATE_FAILED": 4,
        "RUNTIME_STATE_DELETING": 5,
        "RUNTIME_STATE_DELETED": 6,
    }
    assert _enum(runtime_pb2.RuntimeOperation) == {
        "RUNTIME_OPERATION_UNSPECIFIED": 0,
        "RUNTIME_OPERATION_CREATE": 1,
        "RUNTIME_OPERATION_SUSPEND": 2,
        "RUNTIME_OPERATION_RESUME": 3,
        "RUNTIME_OPERATION_DELETE": 4,
        "RUNTIME_OPERATION_NONE": 5,
    }
    assert _enum(checkpoints_pb2.CheckpointState) == {
        "CHECKPOINT_STATE_UNSPECIFIED": 0,
        "CHECKPOINT_STATE_CREATING": 1,
        "CHECKPOINT_STATE_READY": 2,
        "CHECKPOINT_STATE_FAILED": 3,
        "CHECKPOINT_STATE_DELETING": 4,
    }
    assert _enum(sessions_pb2.SessionSharePermission) == {
        "SESSION_SHARE_PERMISSION_UNSPECIFIED": 0,
        "SESSION_SHARE_PERMISSION_READ_ONLY": 1,
        "SESSION_SHARE_PERMISSION_READ_WRITE": 2,
    }
    for enum in (
        runtime_pb2.RuntimeState,
        runtime_pb2.RuntimeOperation,
        checkpoints_pb2.CheckpointState,
        sessions_pb2.SessionSharePermission,
    ):
        assert enum.DESCRIPTOR.full_name.startswith(PKG + ".")


def test_common_messages() -> None:
    _check(common_pb2.ResourceReference, {1: ("namespace", STR), 2: ("name", STR)})
    _check(common_pb2.PageRequest, {1: ("limit", I32), 2: ("page_token", STR), 3: ("offset", I32)})
    _check(common_pb2.PageResponse, {1: ("next_page_token", STR)})
    _check(sessions_pb2.Failure, {1: ("reason", STR), 2: ("message", STR)})


TS = "google.protobuf.Timestamp"
REF = f"{PKG}.ResourceReference"
PAGE_REQ = f"{PKG}.PageRequest"
PAGE_RESP = f"{PKG}.PageResponse"


def test_session_message() -> None:
    _check(
        sessions_pb2.Session,
        {
            1: ("id", STR),
            2: ("creator", STR),
            5: ("prepared_revision", STR),
            6: ("a2a_authority", STR),
            7: ("state", ENUM, f"{PKG}.RuntimeState"),
            8: ("operation", ENUM, f"{PKG}.RuntimeOperation"),
            9: ("failure", MSG, f"{PKG}.Failure"),
            10: ("created_at", MSG, TS),
            11: ("updated_at", MSG, TS),
            13: ("name", STR),
            14: ("context_id", STR),
            15: ("agent", MSG, REF),
        },
    )
    proto = descriptor_pb2.DescriptorProto()
    sessions_pb2.Session.DESCRIPTOR.CopyToProto(proto)
    reserved = sorted(n for r in proto.reserved_range for n in range(r.start, r.end))
    assert reserved == [3, 4, 12]


def test_session_requests_and_responses() -> None:
    _check(
        sessions_pb2.CreateSessionRequest,
        {3: ("request_id", STR), 4: ("name", STR), 5: ("agent", MSG, REF)},
    )
    for name in ("Get", "Suspend", "Resume", "Delete"):
        _check(getattr(sessions_pb2, f"{name}SessionRequest"), {1: ("session_id", STR)})
    for name in ("Create", "Get", "Suspend", "Resume", "Delete", "UpdateName"):
        resp = "UpdateSessionNameResponse" if name == "UpdateName" else f"{name}SessionResponse"
        _check(getattr(sessions_pb2, resp), {1: ("session", MSG, f"{PKG}.Session")})
    _check(
        sessions_pb2.ListSessionsRequest,
        {2: ("all_creators", BOOL), 3: ("page", MSG, PAGE_REQ), 6: ("agent", MSG, REF)},
    )
    _check(
        sessions_pb2.ListSessionsResponse,
        {1: ("sessions", MSG, f"{PKG}.Session", True), 2: ("page", MSG, PAGE_RESP)},
    )
    _check(sessions_pb2.UpdateSessionNameRequest, {1: ("session_id", STR), 2: ("name", STR)})
    _check(
        sessions_pb2.SessionShare,
        {
            1: ("id", STR),
            2: ("session_id", STR),
            3: ("permission", ENUM, f"{PKG}.SessionSharePermission"),
            4: ("created_at", MSG, TS),
            5: ("expires_at", MSG, TS),
        },
    )
    _check(
        sessions_pb2.CreateSessionShareRequest,
        {
            1: ("session_id", STR),
            2: ("permission", ENUM, f"{PKG}.SessionSharePermission"),
            3: ("ttl", MSG, "google.protobuf.Duration"),
        },
    )
    _check(
        sessions_pb2.CreateSessionShareResponse,
        {1: ("share", MSG, f"{PKG}.SessionShare"), 2: ("token", STR)},
    )
    _check(sessions_pb2.ListSessionSharesRequest, {1: ("session_id", STR), 2: ("page", MSG, PAGE_REQ)})
    _check(
        sessions_pb2.ListSessionSharesResponse,
        {1: ("shares", MSG, f"{PKG}.SessionShare", True), 2: ("page", MSG, PAGE_RESP)},
    )
    _check(sessions_pb2.RevokeSessionShareRequest, {1: ("share_id", STR)})
    _check(sessions_pb2.RevokeSessionShareResponse, {})


def _methods(file_module: Any, service: str, pkg: str = PKG) -> dict[str, tuple[str, str]]:
    svc = file_module.DESCRIPTOR.services_by_name[service]
    assert svc.full_name == f"{pkg}.{service}"
    return {m.name: (m.input_type.full_name, m.output_type.full_name) for m in svc.methods}


def _plain(rpcs: list[str], pkg: str = PKG) -> dict[str, tuple[str, str]]:
    return {r: (f"{pkg}.{r}Request", f"{pkg}.{r}Response") for r in rpcs}


def test_services() -> None:
    assert _methods(sessions_pb2, "SessionService") == _plain(
        [
            "CreateSession",
            "GetSession",
            "ListSessions",
            "UpdateSessionName",
            "SuspendSession",
            "ResumeSession",
            "DeleteSession",
            "CreateSessionShare",
            "ListSessionShares",
            "RevokeSessionShare",
        ]
    )
    assert _methods(checkpoints_pb2, "CheckpointService") == _plain(
        [
            "CreateCheckpoint",
            "GetCheckpoint",
            "ListCheckpoints",
            "DeleteCheckpoint",
            "ForkSession",
            "UpdateCheckpointName",
        ]
    )
    assert _methods(task_store_pb2, "TaskStoreService") == {
        r: (f"{PKG}.TaskStoreService{r}Request", f"{PKG}.TaskStoreService{r}Response")
        for r in ["CreateTask", "GetTask", "UpdateTask", "ListTasks", "SettleTask"]
    }
    assert _methods(agents_pb2, "AgentService") == _plain(
        ["ApplyAgent", "GetAgent", "ListAgents", "DeleteAgent"]
    )
    assert _methods(inventory_pb2, "InventoryService", "sessionq.v1") == _plain(
        ["ListActors", "ListWorkers"], "sessionq.v1"
    )
    for svc in (
        sessions_pb2.DESCRIPTOR.services_by_name["SessionService"],
        checkpoints_pb2.DESCRIPTOR.services_by_name["CheckpointService"],
        task_store_pb2.DESCRIPTOR.services_by_name["TaskStoreService"],
    ):
        for m in svc.methods:
            assert not m.client_streaming and not m.server_streaming


def test_checkpoint_messages() -> None:
    ckpt = f"{PKG}.Checkpoint"
    _check(
        checkpoints_pb2.Checkpoint,
        {
            1: ("id", STR),
            2: ("session_id", STR),
            3: ("head_task_id", STR),
            4: ("history_sequence", U64),
            5: ("state", ENUM, f"{PKG}.CheckpointState"),
            6: ("created_at", MSG, TS),
            7: ("failure", MSG, f"{PKG}.Failure"),
            8: ("name", STR),
        },
    )
    _check(
        checkpoints_pb2.CreateCheckpointRequest,
        {1: ("session_id", STR), 2: ("request_id", STR), 3: ("expected_head_task_id", STR)},
    )
    for resp in ("CreateCheckpointResponse", "GetCheckpointResponse", "UpdateCheckpointNameResponse"):
        _check(getattr(checkpoints_pb2, resp), {1: ("checkpoint", MSG, ckpt)})
    _check(checkpoints_pb2.GetCheckpointRequest, {1: ("checkpoint_id", STR)})
    _check(checkpoints_pb2.DeleteCheckpointRequest, {1: ("checkpoint_id", STR)})
    _check(checkpoints_pb2.DeleteCheckpointResponse, {})
    _check(checkpoints_pb2.ListCheckpointsRequest, {1: ("session_id", STR), 2: ("page", MSG, PAGE_REQ)})
    _check(
        checkpoints_pb2.ListCheckpointsResponse,
        {1: ("checkpoints", MSG, ckpt, True), 2: ("page", MSG, PAGE_RESP)},
    )
    _check(checkpoints_pb2.ForkSessionRequest, {1: ("checkpoint_id", STR), 2: ("request_id", STR)})
    _check(checkpoints_pb2.ForkSessionResponse, {1: ("session", MSG, f"{PKG}.Session")})
    _check(checkpoints_pb2.UpdateCheckpointNameRequest, {1: ("checkpoint_id", STR), 2: ("name", STR)})


def test_taskstore_messages() -> None:
    task = "lf.a2a.v1.Task"
    p = "TaskStoreService"
    _check(task_store_pb2.StoredTask, {1: ("task", MSG, task), 2: ("version", I64)})
    _check(
        getattr(task_store_pb2, f"{p}CreateTaskRequest"),
        {1: ("session_id", STR), 2: ("task", MSG, task), 3: ("dispatch_id", STR)},
    )
    _check(getattr(task_store_pb2, f"{p}CreateTaskResponse"), {1: ("version", I64)})
    _check(getattr(task_store_pb2, f"{p}GetTaskRequest"), {1: ("session_id", STR), 2: ("task_id", STR)})
    _check(getattr(task_store_pb2, f"{p}GetTaskResponse"), {1: ("stored", MSG, f"{PKG}.StoredTask")})
    _check(
        getattr(task_store_pb2, f"{p}UpdateTaskRequest"),
        {
            1: ("session_id", STR),
            2: ("task", MSG, task),
            3: ("expected_version", I64),
            4: ("event", MSG, "lf.a2a.v1.StreamResponse"),
            5: ("dispatch_id", STR),
        },
    )
    _check(getattr(task_store_pb2, f"{p}UpdateTaskResponse"), {1: ("version", I64)})
    _check(
        getattr(task_store_pb2, f"{p}ListTasksRequest"),
        {1: ("session_id", STR), 2: ("request", MSG, "lf.a2a.v1.ListTasksRequest")},
    )
    _check(
        getattr(task_store_pb2, f"{p}ListTasksResponse"),
        {1: ("result", MSG, "lf.a2a.v1.ListTasksResponse")},
    )
    _check(
        getattr(task_store_pb2, f"{p}SettleTaskRequest"),
        {1: ("session_id", STR), 2: ("task_id", STR), 3: ("version", I64)},
    )
    _check(getattr(task_store_pb2, f"{p}SettleTaskResponse"), {})

    # dispatch_id is proto3 `optional`: it has presence.
    for name in ("CreateTaskRequest", "UpdateTaskRequest"):
        cls = getattr(task_store_pb2, f"{p}{name}")
        assert cls.DESCRIPTOR.fields_by_name["dispatch_id"].has_presence
        msg = cls()
        assert not msg.HasField("dispatch_id")
        msg.dispatch_id = ""
        assert msg.HasField("dispatch_id")


def test_agent_and_inventory_messages() -> None:
    _check(
        agents_pb2.EgressDestination,
        {
            1: ("url", STR),
            2: ("credential_headers", MSG, f"{PKG}.EgressDestination.CredentialHeadersEntry", True),
        },
    )
    assert (
        agents_pb2.EgressDestination.DESCRIPTOR.fields_by_name["credential_headers"]
        .message_type.GetOptions()
        .map_entry
    )
    _check(
        agents_pb2.Agent,
        {
            1: ("ref", MSG, REF),
            2: ("spec", MSG, f"{PKG}.AgentSpec"),
            3: ("conditions", MSG, f"{PKG}.Condition", True),
            4: ("desired_revision", STR),
            5: ("latest_successful_revision", STR),
            6: ("revisions", MSG, f"{PKG}.Revision", True),
            7: ("created_at", MSG, TS),
            8: ("updated_at", MSG, TS),
        },
    )
    _check(
        agents_pb2.ApplyAgentResponse,
        {1: ("agent", MSG, f"{PKG}.Agent"), 2: ("revision_created", BOOL)},
    )
    _check(
        inventory_pb2.Actor,
        {
            1: ("atespace", STR),
            2: ("name", STR),
            3: ("uid", STR),
            4: ("template", STR),
            5: ("state", STR),
            6: ("worker", STR),
            7: ("worker_ip", STR),
            8: ("version", I64),
            9: ("created_at", MSG, TS),
            10: ("updated_at", MSG, TS),
        },
    )
    _check(
        inventory_pb2.ListWorkersResponse,
        {1: ("workers", MSG, "sessionq.v1.Worker", True), 2: ("page", MSG, PAGE_RESP)},
    )


# --- (3) coexistence with the a2a-sdk -------------------------------------------------------


def test_taskstore_shares_a2a_types_with_the_sdk() -> None:
    from a2a.types import a2a_pb2

    from sessionq._pb.kagent.api.v1alpha1 import (  # noqa: F401
        agents_pb2,
        checkpoints_pb2,
        common_pb2,
        runtime_pb2,
        sessions_pb2,
        task_store_pb2,
    )

    # Our file depends on the very FileDescriptor the SDK registered (not a second copy).
    assert task_store_pb2.DESCRIPTOR.dependencies[0] is a2a_pb2.DESCRIPTOR
    field = task_store_pb2.StoredTask.DESCRIPTOR.fields_by_name["task"]
    assert field.message_type is a2a_pb2.Task.DESCRIPTOR
    stored = task_store_pb2.StoredTask(
        task=a2a_pb2.Task(id="t1", status=a2a_pb2.TaskStatus(state=a2a_pb2.TASK_STATE_WORKING)),
        version=7,
    )
    round_tripped = task_store_pb2.StoredTask.FromString(stored.SerializeToString())
    assert round_tripped == stored
    assert isinstance(round_tripped.task, a2a_pb2.Task)


def test_fresh_process_imports_in_either_order() -> None:
    script = (
        "import importlib, sys\n"
        "mods = sys.argv[1:]\n"
        "for m in mods: importlib.import_module(m)\n"
        "from sessionq._pb.kagent.api.v1alpha1 import (sessions_pb2_grpc, checkpoints_pb2_grpc,\n"
        "    task_store_pb2_grpc, agents_pb2_grpc)\n"
        "from sessionq._pb.sessionq.v1 import inventory_pb2_grpc\n"
        "print('ok')\n"
    )
    for order in (
        ["a2a.types.a2a_pb2", "sessionq._pb.kagent.api.v1alpha1.task_store_pb2"],
        ["sessionq._pb.kagent.api.v1alpha1.task_store_pb2", "a2a.types.a2a_pb2"],
    ):
        result = subprocess.run(
            [sys.executable, "-c", script, *order],
            cwd=REPO,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "ok"
