"""The A2A Message an `InvokeRequest` carries, as both stand-in runtimes read it."""

from __future__ import annotations

from typing import Any

from a2a.types import a2a_pb2
from google.protobuf import json_format

from sessionq.runtime.base import Code, SubstrateError

__all__ = ["parse_message"]


def parse_message(data: Any) -> a2a_pb2.Message:
    """The A2A Message of an InvokeRequest (protobuf JSON, camelCase; unknown fields ignored)."""
    if not isinstance(data, dict):
        raise SubstrateError(Code.INVALID_ARGUMENT, "invoke: message must be a protobuf JSON object")
    try:
        return json_format.ParseDict(data, a2a_pb2.Message(), ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise SubstrateError(Code.INVALID_ARGUMENT, f"invoke: invalid message: {exc}") from exc
