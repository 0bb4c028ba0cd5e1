"""The task store's forwarder of a sandboxed Actor: a gRPC server on 127.0.0.1:TASKSTORE_PORT of the
Actor's network namespace that passes on the calls of `kagent.api.v1alpha1.TaskStoreService` the
agent kit makes (`ALLOWED`) to the runtime's task store, and nothing else of the API: any other
method is refused with UNIMPLEMENTED before it leaves the sandbox's side, and what is not gRPC
(an HTTP/1 request to /healthz, the console, A2A's HTTP bindings) gets no answer from this port.

Each call is passed on as it came: the request's bytes, its metadata (the workload credential in
``authorization``) and its deadline; the answer's bytes and trailers, or its status code and details.
"""

from __future__ import annotations

import grpc
import grpc.aio

from sessionq.runtime.process.sandbox import NetNamespace

__all__ = ["ALLOWED", "TaskStoreForwarder"]

SERVICE = "kagent.api.v1alpha1.TaskStoreService"
# what sessionq.runtime.taskstore_client calls (all unary)
ALLOWED = frozenset(f"/{SERVICE}/{m}" for m in ("CreateTask", "GetTask", "UpdateTask", "ListTasks", "SettleTask"))
# metadata gRPC sets itself on the next hop
_HOP = frozenset({"grpc-timeout", "grpc-encoding", "grpc-accept-encoding", "user-agent", "te", "content-type"})
_UNLIMITED = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]


class _Forward(grpc.GenericRpcHandler):
    def __init__(self, upstream: grpc.aio.Channel) -> None:
        self.upstream = upstream

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method = handler_call_details.method
        if method not in ALLOWED:
            return None  # UNIMPLEMENTED
        call = self.upstream.unary_unary(method)

        async def forward(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            metadata = tuple((k, v) for k, v in context.invocation_metadata() or ()
                             if not k.startswith(":") and k not in _HOP)
            try:
                sent = call(request, metadata=metadata, timeout=context.time_remaining())
                answer: bytes = await sent
                trailers = await sent.trailing_metadata()
            except grpc.aio.AioRpcError as exc:
                await context.abort(exc.code(), exc.details() or "")
            if trailers:  # what the task store says beside the answer (x-sessionq-settled)
                context.set_trailing_metadata(tuple(trailers))
            return answer

        return grpc.unary_unary_rpc_method_handler(forward)


class TaskStoreForwarder:
    """The forwarder of one Actor's network namespace to the task store at `address` (host:port)."""

    def __init__(self, netns: NetNamespace, address: str) -> None:
        self.netns = netns
        self.address = address
        self.upstream = grpc.aio.insecure_channel(address, options=_UNLIMITED)
        self.upstream.get_state(try_to_connect=True)  # connected before the Actor's first call
        self.server = grpc.aio.server(options=[*_UNLIMITED, ("grpc.so_reuseport", 0)])
        self.server.add_generic_rpc_handlers((_Forward(self.upstream),))

    async def start(self, port: int) -> None:
        # the listening socket is made (and bound) by the thread that adds the port: one inside
        bound = self.netns.call_inside(lambda: self.server.add_insecure_port(f"127.0.0.1:{port}"))
        if bound != port:
            raise OSError(f"the task store's forwarder could not listen on 127.0.0.1:{port} inside")
        await self.server.start()

    async def close(self) -> None:
        await self.server.stop(0)
        await self.upstream.close()
