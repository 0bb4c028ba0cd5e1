"""The API server's method handlers: one table, each handler wrapped once when the server is built.

The checks every request passes before its servicer (InputGuard: malformed bodies, unimplemented
methods; RequestValidation: the protos' buf.validate rules) are wrappers of each method's handler,
not server interceptors: grpcio's aio server runs its interceptor chain for every call (a coroutine
per interceptor, before the handler is found), and every method registered with
`add_registered_method_handlers` (what the generated `add_*Servicer_to_server` functions do) keeps
one request future of its own that the server's main loop passes to `asyncio.wait` at every call,
a cost that grows with the number of methods (docs/performance.md measures both). `HandlerTable`
takes the generated functions' handlers instead of the server, applies the same wrappers once per
method, and is given to the server as one generic handler: one request future, no interceptors,
one dict lookup per call."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import grpc

Wrap = Callable[[str, grpc.RpcMethodHandler], grpc.RpcMethodHandler]


class HandlerTable(grpc.GenericRpcHandler):
    """Stands in for the server in the generated `add_*Servicer_to_server(servicer, table)` calls
    and collects their handlers, wrapped by `wrap` (method, handler) -> handler. `unknown` is told
    the name of a called method that no service has (grpcio answers it UNIMPLEMENTED)."""

    def __init__(self, wrap: Wrap, unknown: Callable[[str], None] | None = None) -> None:
        self._wrap = wrap
        self._unknown = unknown
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}
        self._services: set[str] = set()
        self._generic: list[grpc.GenericRpcHandler] = []

    # the two calls the generated add_*Servicer_to_server functions make on a server

    def add_generic_rpc_handlers(self, handlers: Iterable[grpc.GenericRpcHandler]) -> None:
        # the generated functions give the same handlers by name next (add_registered_method_handlers);
        # a generic handler whose methods are never named could not be wrapped: check() refuses it
        self._generic.extend(handlers)

    def add_registered_method_handlers(self, service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        for name, handler in handlers.items():
            method = f"/{service}/{name}"
            if method in self._handlers:
                raise ValueError(f"{method} is registered twice")
            self._handlers[method] = self._wrap(method, handler)
        self._services.add(service)

    def check(self) -> None:
        """Raise when a generic handler was added whose service's methods were never named (its
        calls would go unchecked)."""
        for g in self._generic:
            name = g.service_name() if isinstance(g, grpc.ServiceRpcHandler) else None
            if name not in self._services:
                raise TypeError(f"a generic handler ({name or type(g).__name__}) without its methods by name")

    @property
    def methods(self) -> list[str]:
        return sorted(self._handlers)

    def streaming(self, method: str) -> tuple[bool, bool] | None:
        """Whether `method` (/package.Service/Method) streams its requests and its responses; None
        when no service has it."""
        handler = self._handlers.get(method)
        return None if handler is None else (handler.request_streaming, handler.response_streaming)

    def handler(self, method: str) -> grpc.RpcMethodHandler | None:
        """The wrapped handler of `method` (what grpcio calls; gRPC-Web calls it in process)."""
        return self._handlers.get(method)

    def unknown(self, method: str) -> None:
        """Tell of a call of a method no service has."""
        if self._unknown is not None:
            self._unknown(method)

    # grpc.GenericRpcHandler

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        handler = self._handlers.get(handler_call_details.method)
        if handler is None and self._unknown is not None:
            self._unknown(handler_call_details.method)
        return handler
