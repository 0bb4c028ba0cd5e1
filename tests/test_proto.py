"""The generated protobuf modules: up to date, wire-compatible with docs/wire.md, and
importable next to the a2a-sdk's own `lf.a2a.v1` module."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

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
TS = "google.protobuf.Timestamp"
PAGE_RESP = f"{PKG}.PageResponse"


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


# --- (2) files and packages (the messages: tests/test_wire_docs.py) ---------------------------


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
    assert [d.name for d in task_store_pb2.DESCRIPTOR.dependencies] == ["a2a.proto", "buf/validate/validate.proto"]


def test_inventory_messages() -> None:
    """sessionq's own service (sessionq.v1); kagent's shapes are checked against the facts in
    tests/test_wire_docs.py."""
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
