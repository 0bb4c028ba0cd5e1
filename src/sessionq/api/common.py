"""What every servicer shares: identity, validation, paging, error mapping, conversions."""

from __future__ import annotations

import base64
import functools
import hashlib
import logging
import re
import time
import unicodedata
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

import grpc
import psycopg
from google.protobuf import json_format
from google.protobuf.timestamp_pb2 import Timestamp
from google.rpc import error_details_pb2, status_pb2
from psycopg_pool import PoolTimeout

from sessionq import errors, metrics
from sessionq.errors import SessionqError

log = logging.getLogger("sessionq.api")

SHARE_TOKEN_HEADER = "x-kagent-share-token"
DEFAULT_PAGE = 50
MAX_PAGE = 100
# how long a mutation waits for its generation when the client set no deadline
DEFAULT_WAIT = 30.0
IDENTITY_CACHE = 4096  # sets of request metadata whose caller Authenticator.identify keeps


@dataclass(frozen=True)
class Identity:
    user: str
    share_hash: str | None = None


class Authenticator:
    """`authorization: Bearer <token>` -> user, by configuration. Without a token the call is the
    anonymous user's when one is configured (`sessionq up`), else UNAUTHENTICATED."""

    def __init__(
        self, tokens: dict[str, str], anonymous_user: str = "", namespaces: dict[str, list[str]] | None = None
    ) -> None:
        self.tokens = dict(tokens)
        self.anonymous_user = anonymous_user
        self.namespaces = dict(namespaces or {})
        # identify() answers the same metadata with the same Identity: the tokens and the anonymous
        # user are fixed for the Authenticator's life, so who sent a given set of headers is too.
        # Only identities are kept (a refused call is worked out again), at most IDENTITY_CACHE
        # sets of metadata (emptied when full: metadata carrying per-call values never fills it for good)
        self._identities: dict[Any, Identity] = {}

    def may_use_namespace(self, who: Identity, namespace: str) -> bool:
        """Whether the caller may use the Agents of a namespace (auth.namespaces)."""
        allowed = self.namespaces.get(who.user)
        return allowed is None or namespace in allowed or "*" in allowed

    def check_namespace(self, who: Identity, namespace: str) -> None:
        if not self.may_use_namespace(who, namespace):
            raise errors.permission_denied(f"{who.user} may not use the agents of namespace {errors.clip(namespace)}")

    def identify(self, context: grpc.aio.ServicerContext) -> Identity:
        md: Any = context.invocation_metadata() or ()
        try:
            known = self._identities.get(md)
        except TypeError:  # metadata that cannot be a key (no gRPC server gives any): not kept
            return self.identify_headers(credential_headers(md))
        if known is not None:
            return known
        who = self.identify_headers(credential_headers(md))
        if len(self._identities) >= IDENTITY_CACHE:
            self._identities.clear()
        self._identities[md] = who
        return who

    def identify_headers(self, md: dict[str, str]) -> Identity:
        """The caller of a request with these (lower-cased) headers or metadata."""
        share = md.get(SHARE_TOKEN_HEADER)
        share_hash = hash_token(share) if share else None
        auth = md.get("authorization", "")
        if auth:
            scheme, _, token = auth.partition(" ")
            user = self.tokens.get(token.strip()) if scheme.lower() == "bearer" else None
            if not user:
                raise errors.unauthenticated("the bearer token is not recognised")
            return Identity(user, share_hash)
        if self.anonymous_user:
            return Identity(self.anonymous_user, share_hash)
        raise errors.unauthenticated("an authorization bearer token is required")


# headers that name the caller: each may come once (which of several to believe is no client's choice)
CREDENTIAL_HEADERS = ("authorization", SHARE_TOKEN_HEADER)


def credential_headers(pairs: Iterable[tuple[str, Any]]) -> dict[str, str]:
    """The (lower-cased) text headers or metadata of a request; UNAUTHENTICATED when a credential
    header comes more than once."""
    out: dict[str, str] = {}
    for key, value in pairs:
        if not isinstance(value, str):
            continue
        name = key.lower()
        if name in out and name in CREDENTIAL_HEADERS:
            raise errors.unauthenticated(f"the {name} header must be sent once (it came several times)")
        out[name] = value
    return out


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# -- validation ---------------------------------------------------------------------------------


def parse_uuid(value: str, field: str) -> UUID:
    """A UUID field as a UUID. The request fields that carry one have a string.uuid rule
    (api/validation.py), so this only converts them; page tokens and the A2A ids are checked here."""
    if not value:
        raise errors.invalid(f"{field} is required")
    try:
        return UUID(value)
    except ValueError:
        raise errors.invalid(f"{field} {errors.clip(value)!r} is not a valid UUID") from None


def check_request_id(value: str, field: str = "request_id") -> str:
    """Its length (1-128) is a buf.validate rule of every request that has one; control characters
    are sessionq's own rule, which the protos do not express (a request id is quoted in messages,
    logs and operator views)."""
    if has_control(value):
        raise errors.invalid(f"{field} must not contain control characters")
    return value


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def has_control(value: str) -> bool:
    """Whether the text holds a control character (C0, DEL or C1)."""
    return bool(_CONTROL.search(value)) or any(unicodedata.category(c) == "Cc" for c in value)


def check_display_name(value: str, field: str = "name") -> str:
    if len(value) > 200:
        raise errors.invalid(f"{field} must be at most 200 characters (got {len(value)})")
    if value != value.strip():
        raise errors.invalid(f"{field} must not start or end with white space")
    if has_control(value):
        raise errors.invalid(f"{field} must not contain control characters")
    return value


def page_limit(limit: int) -> int:
    """The rows of a page: 0 is the default. PageRequest.limit's rule (0..100) is checked before
    the servicer runs; the range is checked here too for the A2A and inventory pages."""
    if limit < 0 or limit > MAX_PAGE:
        raise errors.invalid(f"page.limit must be between 0 and {MAX_PAGE} (got {limit})")
    return limit or DEFAULT_PAGE


def encode_token(*parts: str) -> str:
    raw = "\x1f".join(("v1", *parts)).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_token(token: str, count: int) -> list[str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        raise errors.invalid("page_token is not valid") from None
    parts = raw.split("\x1f")
    if len(parts) != count + 1 or parts[0] != "v1":
        raise errors.invalid("page_token is not valid")
    return parts[1:]


def after_id(page: Any) -> UUID | None:
    """Where an id-ordered listing resumes: after the id its page token names (None: the start)."""
    return parse_uuid(decode_token(page.page_token, 1)[0], "page_token") if page.page_token else None


def next_id_token(rows: list[Any], limit: int) -> str:
    """The continuation of an id-ordered page read with limit + 1 rows: only when the look-ahead
    row exists, naming the last returned id."""
    return encode_token(str(rows[limit - 1].id)) if len(rows) > limit else ""


def ts(value: datetime | None) -> Timestamp | None:
    if value is None:
        return None
    t = Timestamp()
    t.FromDatetime(value)
    return t


def wait_budget(context: grpc.aio.ServicerContext) -> float:
    """How long a call may wait for its outcome: the caller's deadline less a margin in which to
    answer (UNAVAILABLE "retry the same call") before the deadline fires on the client."""
    remaining = context.time_remaining()
    if remaining is None:
        return DEFAULT_WAIT
    return max(0.0, remaining - min(1.0, max(0.1, remaining * 0.05)))


# -- error mapping --------------------------------------------------------------------------------

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def rpc(method: F) -> F:
    """Servicer method wrapper: SessionqError -> its status (with ErrorInfo when it has a reason);
    anything unexpected -> INTERNAL, logged. Also counts requests by method and code."""

    counters: dict[tuple[str, grpc.StatusCode], Any] = {}  # the metrics' children, by label values
    latencies: dict[str, Any] = {}

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        name = f"{type(self).__name__}/{method.__name__}"
        started = time.monotonic()
        code = grpc.StatusCode.OK
        try:
            check_storable(request)
            return await method(self, request, context)
        except SessionqError as e:
            code = e.code
            await abort(context, e)
        except (psycopg.DataError, json_format.Error) as e:
            # a value PostgreSQL or JSON cannot represent that validation let through: still the client's
            code = grpc.StatusCode.INVALID_ARGUMENT
            log.info("unrepresentable value in %s: %s", name, errors.clip(e, 500))
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                errors.clip(f"the request holds a value that cannot be stored: {e}", errors.MAX_STATUS_MESSAGE),
            )
        except (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout) as e:
            # the database is unreachable or failing over: a transient condition the client retries
            code = grpc.StatusCode.UNAVAILABLE
            log.warning("database unavailable in %s: %s", name, e)
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the database is unavailable; retry the same call")
        except Exception:
            if isinstance(context.code(), grpc.StatusCode) and context.code() != grpc.StatusCode.OK:
                code = context.code()
                raise
            code = grpc.StatusCode.INTERNAL
            log.exception("unexpected error in %s", name)
            await context.abort(grpc.StatusCode.INTERNAL, "internal error; see the server log")
        finally:
            counter = counters.get((name, code))
            if counter is None:
                counter = counters[(name, code)] = metrics.GRPC_REQUESTS.labels(method=name, code=code.name)
            latency = latencies.get(name)
            if latency is None:
                latency = latencies[name] = metrics.GRPC_LATENCY.labels(method=name)
            counter.inc()
            latency.observe(time.monotonic() - started)

    return wrapper  # type: ignore[return-value]


_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")  # an escaped NUL, not an escaped backslash before "u0000"

# message types whose JSON form is special (json_format converts them and may refuse a value: NaN
# or infinity in a Struct, a timestamp or duration out of range, an Any of an unknown type, a field
# mask path it cannot spell): checked through json_format itself, as before
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
    JSON as a whole request used to be (tests/api/test_storable.py compares both on many requests)."""
    if not hasattr(request, "DESCRIPTOR"):
        return
    _check_message(request)


def check_storable_json(request: Any) -> None:
    """The reference check: the whole request through json_format (what check_storable must agree
    with; kept for the tests that compare them)."""
    if not hasattr(request, "DESCRIPTOR"):
        return
    _check_json_special(request)


async def abort(context: grpc.aio.ServicerContext, e: SessionqError) -> None:
    """Answer the error's status. The message is capped (errors.MAX_STATUS_MESSAGE): every value a
    message quotes is cut by errors.clip already; this is the backstop, as a status travels in a
    header that clients refuse beyond a few kilobytes."""
    message = errors.clip(e.message, errors.MAX_STATUS_MESSAGE)
    trailing: tuple[tuple[str, bytes], ...] = ()
    if e.reason:
        status = status_pb2.Status(code=e.code.value[0], message=message)
        info = error_details_pb2.ErrorInfo(reason=e.reason, domain=errors.error_domain(e.reason))
        status.details.add().Pack(info)
        trailing = (("grpc-status-details-bin", status.SerializeToString()),)
    await context.abort(e.code, message, trailing_metadata=trailing)
