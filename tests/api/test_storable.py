"""check_storable (api/storable.py) walks the set fields of a request instead of converting the whole
request to JSON (issue 23); it must refuse exactly what the JSON check refused: NUL in any text
(at any depth, in lists and map keys and values), and the values JSON cannot hold (NaN and
infinities in a Struct, timestamps and durations out of range).

Every request type of every service sessionq serves is tried with a NUL in each string field it can
reach (one at a time, to a bounded depth), with clean text, and with the special types' bad values;
both checks must agree on each."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from a2a.types import a2a_pb2
from google.protobuf import struct_pb2
from google.protobuf.message import Message

from sessionq import errors
from sessionq._pb.kagent.api.v1alpha1 import (
    agents_pb2,
    checkpoints_pb2,
    common_pb2,
    sandboxes_pb2,
    sessions_pb2,
    task_store_pb2,
)
from sessionq._pb.sessionq.v1 import inventory_pb2
from sessionq.api.storable import check_storable, check_storable_json

pytestmark = pytest.mark.pooler  # also run through PgBouncer (make test-pooler)

MODULES = (sessions_pb2, agents_pb2, checkpoints_pb2, sandboxes_pb2, task_store_pb2, inventory_pb2, a2a_pb2)
MAX_DEPTH = 4


def request_types() -> list[Any]:
    out = []
    for module in MODULES:
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                out.append(method.input_type)
    return sorted({d.full_name: d for d in out}.values(), key=lambda d: d.full_name)


def _cls(descriptor: Any) -> type[Message]:
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(descriptor)


def string_paths(descriptor: Any, depth: int = 0, seen: tuple[str, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Paths (tuples of field descriptors, and 'key'/'value' for maps) to every string this type can hold."""
    if depth > MAX_DEPTH or descriptor.full_name in seen or descriptor.full_name.startswith("google.protobuf."):
        return
    for f in descriptor.fields:
        if f.type == f.TYPE_STRING:
            yield (f,)
        elif f.message_type is not None:
            mt = f.message_type
            if mt.GetOptions().map_entry:
                k, v = mt.fields_by_name["key"], mt.fields_by_name["value"]
                if k.type == k.TYPE_STRING:
                    yield (f, "key")
                if v.type == v.TYPE_STRING:
                    yield (f, "value")
                elif v.message_type is not None:
                    for rest in string_paths(v.message_type, depth + 1, (*seen, descriptor.full_name)):
                        yield (f, "value", *rest)
            else:
                for rest in string_paths(mt, depth + 1, (*seen, descriptor.full_name)):
                    yield (f, *rest)


def build(descriptor: Any, path: tuple[Any, ...], text: str) -> Message:
    msg = _cls(descriptor)()
    _set(msg, path, text)
    return msg


def _set(msg: Message, path: tuple[Any, ...], text: str) -> None:
    f = path[0]
    if f.type == f.TYPE_STRING:
        if f.is_repeated:
            getattr(msg, f.name).extend(["clean", text])
        else:
            setattr(msg, f.name, text)
        return
    container = getattr(msg, f.name)
    if f.message_type.GetOptions().map_entry:
        which = path[1]
        v = f.message_type.fields_by_name["value"]
        if which == "key":
            if v.message_type is not None:
                _ = container[text]  # creates the entry
            else:
                container[text] = v.default_value
        elif v.type == v.TYPE_STRING:
            container["k"] = text
        else:
            _set(container["k"], path[2:], text)
        return
    if f.is_repeated:
        _set(container.add(), path[1:], text)
    else:
        _set(container, path[1:], text)


def verdict(check: Any, msg: Message) -> tuple[str, str] | None:
    try:
        check(msg)
    except errors.SessionqError as e:
        assert e.code == grpc.StatusCode.INVALID_ARGUMENT
        # the JSON check names the field of the outer message too: the same refusal, worded the same
        # up to that prefix
        kind = "NUL" if "NUL" in e.message else "unstorable" if "cannot be stored" in e.message else e.message
        return (e.code.name, kind)
    return None


CASES = [(d, p) for d in request_types() for p in string_paths(d)]


def test_every_request_type_has_text_to_check():
    assert len(request_types()) > 40
    assert len(CASES) > 200


@pytest.mark.parametrize("descriptor", request_types(), ids=lambda d: d.full_name)
def test_nul_anywhere_refused_as_before(descriptor: Any):
    paths = [p for d, p in CASES if d is descriptor]
    for path in paths:
        for text, refused in (("a\x00b", True), ("\x00", True), ("clean text \\u0000 é", False)):
            try:
                msg = build(descriptor, path, text)
            except (TypeError, ValueError):
                continue  # a map of non-text values keyed by text: covered by the key path
            fast, slow = verdict(check_storable, msg), verdict(check_storable_json, msg)
            assert fast == slow, (descriptor.full_name, [getattr(x, "name", x) for x in path], text)
            assert (fast is not None) == refused, (descriptor.full_name, [getattr(x, "name", x) for x in path], text)


def _struct(value: float) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update({"k": {"inner": [1, value]}})
    return s


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 1.5])
def test_struct_values_json_cannot_hold(value: float):
    msg = a2a_pb2.SendMessageRequest(tenant="kagent/a", message=a2a_pb2.Message(message_id="m"))
    msg.metadata.CopyFrom(_struct(value))
    fast, slow = verdict(check_storable, msg), verdict(check_storable_json, msg)
    assert fast == slow
    assert (fast is not None) == (not math.isfinite(value))
    nested = a2a_pb2.SendMessageRequest(message=a2a_pb2.Message(message_id="m", parts=[a2a_pb2.Part()]))
    nested.message.parts[0].data.struct_value.CopyFrom(_struct(value)) if hasattr(
        nested.message.parts[0].data, "struct_value") else nested.message.parts[0].data.CopyFrom(
        struct_pb2.Value(struct_value=_struct(value)))
    assert verdict(check_storable, nested) == verdict(check_storable_json, nested)
    assert (verdict(check_storable, nested) is not None) == (not math.isfinite(value))


def test_struct_nul_refused():
    msg = a2a_pb2.SendMessageRequest(message=a2a_pb2.Message(message_id="m"))
    msg.metadata.update({"a\x00": "x"})
    assert verdict(check_storable, msg) == verdict(check_storable_json, msg) is not None
    msg2 = a2a_pb2.SendMessageRequest(message=a2a_pb2.Message(message_id="m"))
    msg2.metadata.update({"a": ["x", {"b": "c\x00"}]})
    assert verdict(check_storable, msg2) == verdict(check_storable_json, msg2) is not None


def test_timestamp_out_of_range_refused():
    found = False
    for d in request_types():
        for f in d.fields:
            if f.message_type is not None and f.message_type.full_name == "google.protobuf.Timestamp":
                msg = _cls(d)()
                getattr(msg, f.name).seconds = 10**13  # beyond year 9999
                assert verdict(check_storable, msg) == verdict(check_storable_json, msg) is not None
                found = True
    if not found:  # no request has a top-level timestamp: a nested one, in a task store update
        pytest.skip("no request type has a Timestamp field at the top level")


def test_duration_out_of_range_refused():
    msg = sessions_pb2.CreateSessionShareRequest(session_id="x")
    msg.ttl.seconds = 10**12  # beyond what a Duration's JSON may hold
    assert verdict(check_storable, msg) == verdict(check_storable_json, msg) is not None


def test_clean_requests_pass_quickly():
    get = sessions_pb2.GetSessionRequest(session_id="0198c3d7-4f2a-7b61-9c3e-5d8f7a2b4e10")
    lst = sessions_pb2.ListSessionsRequest(page=common_pb2.PageRequest(limit=50, page_token="abc"))
    for msg in (get, lst):
        assert verdict(check_storable, msg) is None and verdict(check_storable_json, msg) is None
    assert verdict(check_storable, sessions_pb2.GetSessionRequest(session_id="a\x00")) is not None
