"""What no field can hold, refused before anything is written: NUL characters (PostgreSQL text
and jsonb cannot store them), and NaN, infinities or out-of-range timestamps (not JSON)."""

from __future__ import annotations

import re
from typing import Any

from google.protobuf import json_format

from sessionq import errors

_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")  # an escaped NUL, not an escaped backslash before "u0000"

# message types whose JSON form is special (json_format converts them and may refuse a value: NaN
# or infinity in a Struct, a timestamp or duration out of range, an Any of an unknown type, a field
# mask path it cannot spell): checked through json_format itself
_JSON_SPECIAL = frozenset({
    "google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue", "google.protobuf.Timestamp",
    "google.protobuf.Duration", "google.protobuf.Any", "google.protobuf.FieldMask",
})
_TEXT_TYPES: dict[Any, bool] = {}  # descriptor -> whether a value of this type can hold text or a special type


def _may_hold_text(descriptor: Any) -> bool:
    """Whether a message of this type can hold a string (or a special JSON type), at any depth;
    computed once per type (recursive types count as holding text)."""
    known = _TEXT_TYPES.get(descriptor)
    if known is not None:
        return known
    _TEXT_TYPES[descriptor] = True  # a cycle answers yes while this type is being computed
    result = descriptor.full_name in _JSON_SPECIAL or any(
        f.type == f.TYPE_STRING or (f.message_type is not None and _may_hold_text(f.message_type))
        for f in descriptor.fields
    )
    _TEXT_TYPES[descriptor] = result
    return result


def _check_json_special(message: Any) -> None:
    try:
        text = json_format.MessageToJson(message)
    except (json_format.Error, ValueError) as e:
        raise errors.invalid(f"the request holds a value that cannot be stored: {errors.clip(e, 200)}") from None
    if _JSON_NUL.search(text):
        raise errors.invalid("text fields must not contain NUL characters")


def _check_message(message: Any) -> None:
    descriptor = message.DESCRIPTOR
    if descriptor.full_name in _JSON_SPECIAL:
        _check_json_special(message)
        return
    if not _may_hold_text(descriptor):
        return
    for field, value in message.ListFields():
        if field.type == field.TYPE_STRING:
            if field.is_repeated:
                if any("\x00" in v for v in value):
                    raise errors.invalid("text fields must not contain NUL characters")
            elif "\x00" in value:
                raise errors.invalid("text fields must not contain NUL characters")
        elif field.message_type is not None:
            if field.message_type.GetOptions().map_entry:
                key_field, value_field = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
                for k, v in value.items():
                    if key_field.type == key_field.TYPE_STRING and "\x00" in k:
                        raise errors.invalid("text fields must not contain NUL characters")
                    if value_field.type == value_field.TYPE_STRING:
                        if "\x00" in v:
                            raise errors.invalid("text fields must not contain NUL characters")
                    elif value_field.message_type is not None:
                        _check_message(v)
            elif field.is_repeated:
                if _may_hold_text(field.message_type):
                    for v in value:
                        _check_message(v)
            elif _may_hold_text(field.message_type):
                _check_message(value)


def check_storable(request: Any) -> None:
    """Refuse what no field can hold before anything is written: NUL characters (PostgreSQL text
    and jsonb cannot store them), and NaN, infinities or out-of-range timestamps (not JSON).

    It walks the fields that are set, once per request, and looks at text only: a message type
    that cannot hold a string is skipped whole (known per type), and the types whose JSON form is
    special (Struct, Value, Timestamp, Duration, Any, FieldMask) are checked by converting them to
    JSON, as check_storable_json checks a whole request (tests/api/test_storable.py compares both on
    many requests)."""
    if not hasattr(request, "DESCRIPTOR"):
        return
    _check_message(request)


def check_storable_json(request: Any) -> None:
    """The reference check: the whole request through json_format (what check_storable must agree
    with; kept for the tests that compare them)."""
    if not hasattr(request, "DESCRIPTOR"):
        return
    _check_json_special(request)
