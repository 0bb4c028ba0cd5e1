"""The API server's handler table (api/handlers.py): every method of every service wrapped once,
with the same checks the interceptors made, and nothing left unwrapped (issue 23)."""

from __future__ import annotations

import grpc
import pytest
from a2a.types import a2a_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

from sessionq._pb.kagent.api.v1alpha1 import sessions_pb2, sessions_pb2_grpc
from sessionq.api.handlers import HandlerTable
from sessionq.api.server import SERVICE_NAMES, ApiServer
from sessionq.config import defaults

pytestmark = pytest.mark.pooler  # also run through PgBouncer (make test-pooler)


def _descriptor_methods() -> set[str]:
    from google.protobuf import descriptor_pool

    pool = descriptor_pool.Default()
    a2a_pb2.DESCRIPTOR  # noqa: B018 - loads the A2A descriptors into the default pool
    names = [*SERVICE_NAMES, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME]
    return {f"/{name}/{m.name}" for name in names for m in pool.FindServiceByName(name).methods}


async def test_the_table_holds_every_method_of_every_service_wrapped(store):
    seen: list[str] = []

    server = ApiServer(defaults(), store, address="127.0.0.1:0")
    try:
        assert set(server.handlers.methods) == _descriptor_methods()
        # each handler went through both checks: a table built with a recording wrapper sees them all
        table = HandlerTable(lambda method, handler: seen.append(method) or handler)
        sessions_pb2_grpc.add_SessionServiceServicer_to_server(sessions_pb2_grpc.SessionServiceServicer(), table)
        table.check()
        assert sorted(seen) == table.methods and "/kagent.api.v1alpha1.SessionService/GetSession" in seen
    finally:
        await server.server.stop(0)


def test_a_generic_handler_without_its_methods_by_name_is_refused():
    table = HandlerTable(lambda method, handler: handler)
    generic = grpc.method_handlers_generic_handler(
        "x.Service", {"M": grpc.unary_unary_rpc_method_handler(lambda request, context: None)})
    table.add_generic_rpc_handlers((generic,))
    with pytest.raises(TypeError, match=r"x\.Service"):
        table.check()
    table.add_registered_method_handlers("x.Service", {"M": grpc.unary_unary_rpc_method_handler(lambda r, c: None)})
    table.check()
    with pytest.raises(ValueError, match="registered twice"):
        table.add_registered_method_handlers("x.Service", {"M": grpc.unary_unary_rpc_method_handler(lambda r, c: None)})


async def test_health_reflection_and_validation_answer_through_the_table(api):
    r = await health_pb2_grpc.HealthStub(api.channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert r.status == health_pb2.HealthCheckResponse.SERVING
    stub = reflection_pb2_grpc.ServerReflectionStub(api.channel)
    answers = [a async for a in stub.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5)]
    listed = {s.name for s in answers[0].list_services_response.service}
    assert set(SERVICE_NAMES) <= listed
    # a buf.validate rule (session_id must be a UUID) still answers before the servicer runs
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await sessions_pb2_grpc.SessionServiceStub(api.channel).GetSession(
            sessions_pb2.GetSessionRequest(session_id="nope"), metadata=api.md(), timeout=5)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "session_id" in (e.value.details() or "")


class _Context:
    """What Authenticator.identify reads of a servicer context: the request's metadata."""

    def __init__(self, md: tuple[tuple[str, str], ...]) -> None:
        self.md = md

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.md


def test_identify_keeps_identities_only_and_answers_each_metadata_as_before(monkeypatch):
    from sessionq.api import auth as authentication
    from sessionq.errors import SessionqError

    auth = authentication.Authenticator({"ta": "alice", "tb": "bob"})
    alice = (("user-agent", "x"), ("authorization", "Bearer ta"))
    shared = (("authorization", "Bearer tb"), ("x-kagent-share-token", "s"))
    for _ in range(3):
        assert auth.identify(_Context(alice)) == authentication.Identity("alice")
        assert auth.identify(_Context(shared)) == authentication.Identity("bob", authentication.hash_token("s"))
        assert auth.identify(_Context(alice)) is auth.identify(_Context(alice))  # kept
    # refusals are answered every time, never kept
    twice = (("authorization", "Bearer ta"), ("authorization", "Bearer tb"))
    for md in (twice, (("authorization", "Bearer nope"),), ()):
        for _ in range(2):
            with pytest.raises(SessionqError) as e:
                auth.identify(_Context(md))
            assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
    assert set(auth._identities) == {alice, shared}
    # bounded: emptied when full
    monkeypatch.setattr(authentication, "IDENTITY_CACHE", 4)
    for i in range(10):
        assert auth.identify(_Context((("authorization", "Bearer ta"), ("traceparent", str(i))))).user == "alice"
    assert len(auth._identities) <= 4


async def test_rules_that_cannot_be_checked_answer_internal_through_the_wrapped_handler():
    import protovalidate

    from sessionq.api.validation import RequestValidation

    class Broken:
        def collect_violations(self, request):
            raise protovalidate.CompilationError("no such rule")

    class Servicer(sessions_pb2_grpc.SessionServiceServicer):
        async def GetSession(self, request, context):
            raise AssertionError("the servicer ran")

    table = HandlerTable(RequestValidation(Broken()).wrap)
    sessions_pb2_grpc.add_SessionServiceServicer_to_server(Servicer(), table)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((table,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await sessions_pb2_grpc.SessionServiceStub(channel).GetSession(
                    sessions_pb2.GetSessionRequest(session_id="x"), timeout=5)
    finally:
        await server.stop(0)
    assert e.value.code() == grpc.StatusCode.INTERNAL and "cannot be checked" in (e.value.details() or "")
