"""The protos we ship against the wire facts, message by message: docs/kagent-validation.md (every
message, enum and service it writes out, with names, numbers, types and labels) and docs/wire.md
(field names and numbers, enum values). The facts are read from the documents themselves, so a
drift of either side fails here.

A client is generated from the `.proto` files we ship (protoc, into a scratch directory, under the
files' own upstream names) and its descriptors are what is checked, not the server's modules: a
kagent client built from our files is what must agree with the facts.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import descriptor_pool
from google.protobuf.descriptor import Descriptor, FieldDescriptor

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
PKG = "kagent.api.v1alpha1"
RESERVED: dict[str, tuple[set[int], set[str]]] = {}  # message -> reserved numbers, names (client_pool fills it)

SCALARS = {
    "string": FieldDescriptor.TYPE_STRING,
    "bool": FieldDescriptor.TYPE_BOOL,
    "int32": FieldDescriptor.TYPE_INT32,
    "int64": FieldDescriptor.TYPE_INT64,
    "uint64": FieldDescriptor.TYPE_UINT64,
    "bytes": FieldDescriptor.TYPE_BYTES,
}


# -- a client generated from the shipped .proto files ---------------------------------------------


@pytest.fixture(scope="module")
def client_pool(tmp_path_factory: pytest.TempPathFactory) -> descriptor_pool.DescriptorPool:
    """A descriptor pool built by protoc from proto/ (what a client generated from our files sees)."""
    out = tmp_path_factory.mktemp("client") / "image.binpb"
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_proto.py"), "--image", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    from google.protobuf import descriptor_pb2

    fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for f in fds.file:
        pool.Add(f)
    for f in fds.file:  # reserved ranges and names are read from the descriptor protos
        for m in f.message_type:
            RESERVED[f"{f.package}.{m.name}"] = (
                {n for r in m.reserved_range for n in range(r.start, r.end)}, set(m.reserved_name)
            )
    names = {f.name for f in fds.file}
    assert {"kagent/api/v1alpha1/sessions.proto", "kagent/api/v1alpha1/sandboxes.proto",
            "kagent/api/v1alpha1/agents.proto", "sessionq/v1/inventory.proto"} <= names
    return pool


# -- reading the facts ------------------------------------------------------------------------------


def code_blocks(text: str) -> list[str]:
    return re.findall(r"```[a-z]*\n(.*?)```", text, re.S)


def braced(text: str, start: int) -> tuple[str, int]:
    """The text between the brace at `start` and its partner, and the index after it."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i], i + 1
    raise AssertionError(f"unbalanced braces at {text[start:start + 40]!r}")


def validation_facts() -> tuple[list[tuple[str, str, bool]], list[tuple[str, str]], list[tuple[str, str]]]:
    """(messages: (name, body, partial), enums: (name, body), services: (name, body)) of every code
    block of docs/kagent-validation.md."""
    messages, enums, services = [], [], []
    for block in code_blocks((DOCS / "kagent-validation.md").read_text()):
        for m in re.finditer(r"^(service |enum )?([\w.]+)( \([^)]*\))? \{", block, re.M):
            body, _ = braced(block, m.end() - 1)
            if m.group(1) == "service ":
                services.append((m.group(2), body))
            elif m.group(1) == "enum ":
                enums.append((m.group(2), body))
            else:
                messages.append((m.group(2), body, bool(m.group(3))))
    return messages, enums, services


MESSAGES, ENUMS, SERVICES = validation_facts()
# fields a later snapshot adds to a message (docs §5, "(giantswarm adds)"): the older full shape
# of the same message is checked without them
ADDED = {
    name: {int(n) for n in re.findall(r"=(\d+):", body)} for name, body, partial in MESSAGES if partial
}


def full(name: str, pkg: str = PKG) -> str:
    return name if "." in name else f"{pkg}.{name}"


def entries(body: str) -> list[str]:
    return [e.strip() for e in re.split(r"[;\n]", body) if e.strip()]


# -- docs/kagent-validation.md --------------------------------------------------------------------


def test_the_facts_were_read() -> None:
    names = {m[0] for m in MESSAGES}
    assert {"Session", "Sandbox", "Agent", "CreateSessionRequest", "SessionVolumeSource", "QuiescenceFailure",
            "TaskStoreServiceUpdateTaskRequest", "StructuredObject", "PageRequest"} <= names
    assert {"AgentService", "SandboxService", "SessionService", "CheckpointService", "TaskStoreService"} == {
        s[0] for s in SERVICES
    }
    assert {"RuntimeState", "RuntimeOperation", "SessionSharePermission", "CheckpointState", "SortDirection"} == {
        e[0] for e in ENUMS
    }


@pytest.mark.parametrize(("name", "body", "partial"), MESSAGES, ids=[f"{m[0]}{'+' if m[2] else ''}" for m in MESSAGES])
def test_message(client_pool: descriptor_pool.DescriptorPool, name: str, body: str, partial: bool) -> None:
    msg: Descriptor = client_pool.FindMessageTypeByName(full(name))
    expected: dict[int, tuple[str, int, str | None, bool, bool]] = {}
    reserved_numbers: set[int] = set()
    reserved_names: set[str] = set()
    for entry in entries(body):
        if entry.startswith("reserved "):
            items = [i.strip() for i in entry[len("reserved ") :].split(",")]
            for item in items:
                if item.startswith('"'):
                    reserved_names.add(item.strip('"'))
                else:
                    reserved_numbers.add(int(item))
            continue
        m = re.fullmatch(r"(\w+)=(\d+):(\[\])?(opt )?([\w.]+)", entry)
        assert m, f"{name}: cannot read {entry!r}"
        field, number, repeated, optional, typ = m.groups()
        if typ in SCALARS:
            expected[int(number)] = (field, SCALARS[typ], None, bool(repeated), bool(optional))
        else:
            expected[int(number)] = (field, -1, full(typ), bool(repeated), bool(optional))
    actual = {}
    for f in msg.fields:
        ref = None
        if f.message_type is not None:
            ref = f.message_type.full_name
        elif f.enum_type is not None:
            ref = f.enum_type.full_name
        typ = -1 if ref is not None else f.type
        optional = f.has_presence and f.containing_oneof is not None and f.message_type is None
        actual[f.number] = (f.name, typ, ref, f.is_repeated, optional)
    if partial:  # "(giantswarm adds)": these fields are part of the message
        assert {n: actual.get(n) for n in expected} == expected, name
    else:
        later = ADDED.get(name, set())
        assert {n: a for n, a in actual.items() if n not in later} == expected, name
    numbers, names = RESERVED[msg.full_name]
    assert reserved_numbers <= numbers and reserved_names <= names, name


@pytest.mark.parametrize(("name", "body"), ENUMS, ids=[e[0] for e in ENUMS])
def test_enum(client_pool: descriptor_pool.DescriptorPool, name: str, body: str) -> None:
    enum = client_pool.FindEnumTypeByName(full(name))
    expected = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", body)}
    assert {v.name: v.number for v in enum.values} == expected


@pytest.mark.parametrize(("name", "body"), SERVICES, ids=[s[0] for s in SERVICES])
def test_service(client_pool: descriptor_pool.DescriptorPool, name: str, body: str) -> None:
    service = client_pool.FindServiceByName(full(name))
    expected = {m[0]: (full(m[1]), full(m[2])) for m in re.findall(r"(\w+)\((\w+)\) -> (\w+)", body)}
    actual = {
        m.name: (m.input_type.full_name, m.output_type.full_name)
        for m in service.methods
        if not m.client_streaming and not m.server_streaming  # every RPC of these files is unary
    }
    assert actual == expected
    assert len(service.methods) == len(expected)


def test_sandbox_keeps_field_12_free(client_pool: descriptor_pool.DescriptorPool) -> None:
    assert 12 not in client_pool.FindMessageTypeByName(f"{PKG}.Sandbox").fields_by_number


def test_kagent_package_holds_only_kagent_shapes(client_pool: descriptor_pool.DescriptorPool) -> None:
    """Every message, enum and service of kagent.api.v1alpha1 in our files is one the facts name
    (sessionq's own live in sessionq.v1)."""
    facts = {full(m[0]) for m in MESSAGES} | {full(e[0]) for e in ENUMS} | {full(s[0]) for s in SERVICES}
    ours = set()
    for name in ("common", "runtime", "sessions", "checkpoints", "task_store", "agents", "sandboxes"):
        f = client_pool.FindFileByName(f"kagent/api/v1alpha1/{name}.proto")
        assert f.package == PKG
        ours |= {m.full_name for m in f.message_types_by_name.values()}
        ours |= {e.full_name for e in f.enum_types_by_name.values()}
        ours |= {s.full_name for s in f.services_by_name.values()}
    assert ours - facts == set()
    assert client_pool.FindFileByName("sessionq/v1/inventory.proto").package == "sessionq.v1"


# -- docs/wire.md -----------------------------------------------------------------------------------


def wire_sections() -> list[tuple[str, str]]:
    text = (DOCS / "wire.md").read_text()
    parts = re.split(r"^## (.*)$", text, flags=re.M)
    return list(zip(parts[1::2], parts[2::2], strict=True))


def wire_messages() -> list[tuple[str, str, str]]:
    """(package, message, body) of every `Name { ... }` written out in docs/wire.md."""
    out = []
    for title, body in wire_sections():
        if title.startswith("The runtime"):
            continue  # the Substrate's shapes: our simulator models them, no .proto of ours does
        pkg = "lf.a2a.v1" if title.startswith("A2A") else PKG
        for m in re.finditer(r"`(\w+) \{", body):
            inner, _ = braced(body, m.end() - 1)
            out.append((pkg, m.group(1), inner))
    return out


def wire_enums() -> list[tuple[str, str, str]]:
    out = []
    for title, body in wire_sections():
        if title == "Enums" or title.startswith("A2A"):
            pkg = "lf.a2a.v1" if title.startswith("A2A") else PKG
            for m in re.finditer(r"^- `(\w+)`: (.*)$", body, re.M):
                if m.group(1).endswith("Service"):
                    continue  # a service's RPCs, not an enum
                out.append((pkg, m.group(1), m.group(2)))
    return out


WIRE_MESSAGES = wire_messages()
WIRE_ENUMS = wire_enums()


@pytest.mark.parametrize(("pkg", "name", "body"), WIRE_MESSAGES, ids=[f"{m[0]}.{m[1]}" for m in WIRE_MESSAGES])
def test_wire_md_message(client_pool: descriptor_pool.DescriptorPool, pkg: str, name: str, body: str) -> None:
    if pkg == PKG:
        msg = client_pool.FindMessageTypeByName(f"{pkg}.{name}")
    else:  # the A2A types come from the a2a-sdk's own registration
        from a2a.types import a2a_pb2  # noqa: F401

        msg = descriptor_pool.Default().FindMessageTypeByName(f"{pkg}.{name}")
    for field, number in re.findall(r"(\w+)=(\d+)", body):
        assert field in msg.fields_by_name, f"{name}.{field}"
        assert msg.fields_by_name[field].number == int(number), f"{name}.{field}"


@pytest.mark.parametrize(("pkg", "name", "values"), WIRE_ENUMS, ids=[e[1] for e in WIRE_ENUMS])
def test_wire_md_enum(client_pool: descriptor_pool.DescriptorPool, pkg: str, name: str, values: str) -> None:
    if pkg == PKG:
        enum = client_pool.FindEnumTypeByName(f"{pkg}.{name}")
    else:
        importlib.import_module("a2a.types.a2a_pb2")
        enum = descriptor_pool.Default().FindEnumTypeByName(f"{pkg}.{name}")
    prefix = re.sub(r"(?<!^)([A-Z])", r"_\1", name).upper() + "_"
    actual = {v.name: v.number for v in enum.values}
    for value, number in re.findall(r"([A-Z_]+)=(\d+)", values):
        full_name = value if value.startswith(prefix) else prefix + value
        assert actual.get(full_name) == int(number), f"{name}.{full_name}"


def test_wire_md_was_read() -> None:
    assert {m[1] for m in WIRE_MESSAGES} >= {"Session", "Checkpoint", "SessionShare", "StoredTask", "Task", "Part"}
    assert {e[1] for e in WIRE_ENUMS} >= {"RuntimeState", "RuntimeOperation", "TaskState", "Role"}
