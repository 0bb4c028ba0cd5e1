"""The protos' `buf.validate` rules, enforced once for every request before its servicer runs.

The rules are declared in the `.proto` files exactly as upstream kagent declares them
(docs/kagent-validation.md) and checked by the `protovalidate` engine, which reads them from the
messages' descriptors. `RequestValidation` is a server interceptor: it wraps each method handler
once (cached by method) so that a request that breaks a rule never reaches the servicer, and so
never the database. It wraps the handlers of `InputGuard` (api/guard.py): their deserializer turns
an undecodable body into a marker, which this passes on for InputGuard to answer.

A violation is answered as upstream's go-grpc-middleware interceptor does, INVALID_ARGUMENT with a
`buf.validate.Violations` detail, plus a `google.rpc.BadRequest` detail with one field violation
per rule broken (`field`: the dotted field path; `description`: `<rule id>: <message>`). The status
message names the first violation in plain words; it never repeats the value (protovalidate's
messages quote the rule, never the field's value, and the message is clipped all the same).

What the protos cannot express (ownership, existence, a quantity's arithmetic, what a servicer
looks up) stays in the servicers and the procedures, each with a comment saying why.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import protovalidate
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from sessionq import errors, metrics
from sessionq._pb.buf.validate import validate_pb2
from sessionq.api.guard import Malformed, _metric_name

log = logging.getLogger("sessionq.api")

# plain words for the patterns the protos use (the violation itself keeps protovalidate's message)
DNS_LABEL = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
PLAIN_PATTERNS = {
    DNS_LABEL: "must be a DNS label: lowercase letters, digits and '-', starting and ending with a letter or digit",
    DNS_SUBDOMAIN: "must be a DNS subdomain: DNS labels (lowercase letters, digits and '-') joined by '.'",
    "^(?:$|[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*)$": "must be empty or a DNS subdomain",
    "^(?:$|[^\\p{Z}\\p{Cc}](?:[^\\p{Cc}]*[^\\p{Z}\\p{Cc}])?)$": (
        "must not start or end with a space and must not contain control characters"
    ),
    "^[0-9]+(\\.[0-9]+)?([eE][0-9]+|[kMGTPE]i?)?$": "must be a quantity such as 20Gi",
    "^[^\\p{Z}\\p{Cc}]+$": "must not be empty and must not contain spaces or control characters",
    "^[^\\p{Z}\\p{Cc}]*$": "must not contain spaces or control characters",
}
PLAIN_RULES = {
    "string.uuid_empty": "is required (a UUID)",
    "string.uuid": "must be a UUID such as 0190b2c4-8f5e-7a10-9b2d-3c4d5e6f7a8b",
    "required": "is required",
}
DETAIL_LIMIT = 32  # violations carried in the details at most (a request can break many rules)


def field_path(v: Any) -> str:
    """The violation's field as a dotted path with subscripts (`agent.name`, `items[2]`); empty
    for a message-level rule."""
    if not v.HasField("field"):
        return ""
    parts: list[str] = []
    for e in v.field.elements:
        name = e.field_name
        which = e.WhichOneof("subscript")
        if which == "index":
            name += f"[{e.index}]"
        elif which is not None:
            name += f"[{getattr(e, which)!r}]"
        parts.append(name)
    return ".".join(parts)


def plain(v: Any, rule_value: Any) -> str:
    """One violation in plain words."""
    words = PLAIN_RULES.get(v.rule_id)
    if words is None and v.rule_id == "string.pattern" and isinstance(rule_value, str):
        words = PLAIN_PATTERNS.get(rule_value)
    return words or v.message


def describe(violations: list[Any], rule_values: list[Any]) -> str:
    """The status message: the first violation (field and rule in plain words), and how many more."""
    first = violations[0]
    path = field_path(first)
    text = f"{path} {plain(first, rule_values[0])}" if path else plain(first, rule_values[0])
    more = len(violations) - 1
    if more:
        text += f" (and {more} more violation{'s' if more > 1 else ''} of the request's rules)"
    return errors.clip(f"invalid request: {text}", errors.MAX_STATUS_MESSAGE)


def status_details(violations: list[Any], a2a: bool = False) -> bytes:
    """google.rpc.Status details: buf.validate.Violations (upstream's detail) and BadRequest; on the
    A2A service also ErrorInfo INVALID_PARAMS of the A2A domain (what the a2a-sdk clients recognise)."""
    status = status_pb2.Status(code=grpc.StatusCode.INVALID_ARGUMENT.value[0])
    if a2a:
        status.details.append(_pack(error_details_pb2.ErrorInfo(reason="INVALID_PARAMS", domain=errors.A2A_DOMAIN)))
    status.details.add().Pack(validate_pb2.Violations(violations=violations[:DETAIL_LIMIT]))
    bad = error_details_pb2.BadRequest(
        field_violations=[
            error_details_pb2.BadRequest.FieldViolation(
                field=field_path(v), description=errors.clip(f"{v.rule_id}: {v.message}", 500)
            )
            for v in violations[:DETAIL_LIMIT]
        ]
    )
    status.details.append(_pack(bad))
    return status.SerializeToString()


def _pack(message: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


class RequestValidation(grpc.aio.ServerInterceptor):
    """See the module docstring. One instance per server; wrapped handlers are cached by method."""

    def __init__(self, validator: protovalidate.Validator | None = None) -> None:
        self.validator = validator or protovalidate.Validator()
        self._cache: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        cached = self._cache.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = self.wrap(method, handler)
        self._cache[method] = (handler, wrapped)
        return wrapped

    def violations(self, request: Any) -> tuple[list[Any], list[Any]]:
        """The buf.validate.Violation messages a request breaks (as our generated type) and the
        rule values, in protovalidate's order; empty when it is valid."""
        found = self.validator.collect_violations(request)
        if not found:
            return [], []
        return [validate_pb2.Violation.FromString(v.proto.to_binary()) for v in found], [v.rule_value for v in found]

    def may_break(self, request: Any) -> bool:
        """Whether check() has anything to answer for this request: False for a valid request (the
        one call a valid request costs), True when it breaks a rule or its rules cannot be checked."""
        if isinstance(request, Malformed) or not hasattr(request, "DESCRIPTOR"):
            return False
        try:
            return bool(self.validator.collect_violations(request))
        except (protovalidate.CompilationError, protovalidate.EvaluationError):
            return True

    async def check(self, context: grpc.aio.ServicerContext, method: str, request: Any) -> None:
        """Abort the call with INVALID_ARGUMENT when the request breaks a rule of its message."""
        if isinstance(request, Malformed) or not hasattr(request, "DESCRIPTOR"):
            return  # InputGuard answers a malformed body
        try:
            violations, rule_values = self.violations(request)
        except (protovalidate.CompilationError, protovalidate.EvaluationError) as e:
            # a rule that does not compile or evaluate is sessionq's fault, never the client's
            log.error("cannot validate a request of %s: %s", method, errors.clip(e, 500))
            await context.abort(grpc.StatusCode.INTERNAL, "internal error: the request's rules cannot be checked")
            return
        if not violations:
            return
        metrics.GRPC_REQUESTS.labels(method=_metric_name(method), code=grpc.StatusCode.INVALID_ARGUMENT.name).inc()
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            describe(violations, rule_values),
            trailing_metadata=(
                ("grpc-status-details-bin", status_details(violations, method.startswith(errors.A2A_METHOD_PREFIX))),
            ),
        )

    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """The handler of `method` with this check in front of its behaviour (what intercept_service
        answers; the API server applies it once, at start: api/handlers.py)."""
        check = self.check
        may_break = self.may_break
        if handler.unary_unary is not None:
            uu = handler.unary_unary
            if inspect.iscoroutinefunction(uu):  # InputGuard's, and every servicer of ours

                async def checked_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
                    if may_break(request):
                        await check(context, method, request)
                    return await uu(request, context)

                return grpc.unary_unary_rpc_method_handler(
                    checked_unary, handler.request_deserializer, handler.response_serializer
                )

            async def unary_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
                await check(context, method, request)
                result = uu(request, context)
                return (await result) if inspect.isawaitable(result) else result

            return grpc.unary_unary_rpc_method_handler(
                unary_unary, handler.request_deserializer, handler.response_serializer
            )
        if handler.unary_stream is not None:
            us = handler.unary_stream

            async def unary_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                await check(context, method, request)
                result = us(request, context)
                if hasattr(result, "__aiter__"):
                    async for item in result:
                        yield item
                elif inspect.isawaitable(result):
                    await result  # a servicer that writes with context.write
                elif result is not None:
                    for item in result:
                        yield item

            return grpc.unary_stream_rpc_method_handler(
                unary_stream, handler.request_deserializer, handler.response_serializer
            )
        # no method of ours takes a stream of requests; one that did would be served unchecked
        return handler
