"""The server frame: any `Substrate` served as `ateapi.Control` over grpcio aio, with reflection and
the standard health service.

`ControlService` maps each RPC sessionq's adapter uses onto the `Substrate` method of the same
meaning (the mapping is the adapter's, read backwards: see client.py); the RPCs with no `Substrate`
method (atespaces, access policies, workers' writes, credential minting, tags' listing and update)
answer UNIMPLEMENTED, as grpcio's generated base class does. A `SubstrateError` becomes the status
of the same name, with its message; any other exception becomes INTERNAL (logged here, never sent
as a traceback). Request shapes the frame cannot serve (no actor reference, an empty name) answer
INVALID_ARGUMENT before the runtime is called.

A served simulator stays what it is: its state is in PostgreSQL and its faults are rows there, so
a test in another process injects them as before; a lost response (`lose_after`) is an effect
applied followed by UNAVAILABLE, and a `delay` longer than the caller's deadline is a
DEADLINE_EXCEEDED on the caller's side while the effect still happens.

Runtimes written for serving (the process runtime) implement the same `Substrate` protocol; the
frame needs nothing else. Methods that take the recorded UID get ``None`` when the caller sent no
``x-sessionq-expect-uid`` header (a plain ateapi client): no precondition then.

``extensions=False`` makes the frame behave like a real Substrate towards sessionq's adapter: it
ignores the ``x-sessionq-*`` request headers (the Actor's environment, the expected UID, the
fidelity) and sends no ``x-sessionq-actor-uid`` trailer (the tests' "plain" served simulator).
Its tags hold their own copy of the snapshot, as a real Substrate's do (TagStatus.snapshot, owner
TAG): the copy's URI is the tag's own (`tag_copy_uri`), never the Actor snapshot's.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar, cast

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from sessionq._pb.ateapi import ateapi_pb2 as pb
from sessionq._pb.ateapi import ateapi_pb2_grpc as pb_grpc
from sessionq.runtime.ateapi import codec
from sessionq.runtime.base import Code, SnapshotFidelity, Substrate, SubstrateError, Tag

log = logging.getLogger(__name__)

T = TypeVar("T")
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Control"].full_name


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Consume the outcome of a call whose caller left (nothing else will)."""
    if not task.cancelled():
        task.exception()


def _grpc_code(code: Code) -> grpc.StatusCode:
    return grpc.StatusCode[code.value]


def _metadata(context: grpc.aio.ServicerContext[Any, Any]) -> dict[str, str]:
    return {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}


def tag_copy_uri(t: Tag) -> str:
    """The URI of a tag's own snapshot copy, as a real Substrate stores it apart from the Actor's:
    stable for the tag, new for a tag made again under the same name."""
    made = int(t.created_at.timestamp() * 1_000_000)
    return f"sim-tag://{t.atespace}/{t.name}/{made}/generation-{t.snapshot_generation}"


def _actor_ref(r: pb.ObjectRef, what: str = "actor") -> tuple[str, str]:
    if not r.atespace or not r.name:
        raise SubstrateError(Code.INVALID_ARGUMENT, f"{what}: atespace and name are required")
    return r.atespace, r.name


class ControlService(pb_grpc.ControlServicer):
    """`ateapi.Control` over a `Substrate`."""

    def __init__(self, runtime: Substrate, *, extensions: bool = True) -> None:
        self.runtime = runtime
        self.extensions = extensions

    def _header(self, context: Any, key: str) -> str | None:
        """A sessionq request header (None when absent, or when the frame plays a real Substrate)."""
        return _metadata(context).get(key) if self.extensions else None

    def _uid(self, context: Any) -> str:
        return cast(str, self._header(context, codec.EXPECT_UID) or None)

    def _tag(self, t: Tag) -> pb.Tag:
        """A tag as the frame answers it: a real Substrate's holds its own copy of the snapshot."""
        return codec.tag_to_pb(t if self.extensions else replace(t, snapshot_uri=tag_copy_uri(t)))

    def _trailer(self, context: Any, uid: str) -> None:
        if self.extensions:
            context.set_trailing_metadata(((codec.ACTOR_UID_TRAILER, uid),))

    async def _run(self, context: grpc.aio.ServicerContext[Any, Any], call: Callable[[], Awaitable[T]]) -> T:
        """Run the call to its end even when the caller goes away (a deadline, a dropped
        connection): a runtime does not undo work because nobody listens any more, which is what
        makes DEADLINE_EXCEEDED an uncertain outcome for the caller."""
        task = asyncio.ensure_future(call())
        task.add_done_callback(_retrieve)
        try:
            return await asyncio.shield(task)
        except SubstrateError as e:
            await context.abort(_grpc_code(e.code), e.message)
        except Exception as e:  # a bug of the runtime: INTERNAL, logged here with its traceback
            log.exception("runtime call failed")
            await context.abort(grpc.StatusCode.INTERNAL, f"runtime error: {type(e).__name__}")
        raise AssertionError("abort returned")  # pragma: no cover

    # actors ------------------------------------------------------------------------------------

    async def GetActor(self, request: pb.GetActorRequest, context: Any) -> pb.Actor:
        async def call() -> pb.Actor:
            atespace, name = _actor_ref(request.actor)
            return codec.actor_to_pb(await self.runtime.get_actor(atespace, name))

        return await self._run(context, call)

    async def CreateActor(self, request: pb.CreateActorRequest, context: Any) -> pb.Actor:
        async def call() -> pb.Actor:
            a = request.actor
            atespace, name = _actor_ref(pb.ObjectRef(atespace=a.metadata.atespace, name=a.metadata.name))
            tpl_atespace, tpl_name = _actor_ref(a.actor_template, "actor_template")
            from_tag = None
            if a.HasField("source_tag"):
                tag_atespace, from_tag = _actor_ref(a.source_tag, "source_tag")
                if tag_atespace != atespace:
                    raise SubstrateError(Code.INVALID_ARGUMENT, "source_tag must be in the actor's atespace")
            env: dict[str, str] = {}
            raw = self._header(context, codec.ACTOR_ENV)
            if raw:
                try:
                    parsed = json.loads(raw)
                except ValueError as exc:
                    raise SubstrateError(Code.INVALID_ARGUMENT, f"{codec.ACTOR_ENV}: not JSON") from exc
                if not isinstance(parsed, dict) or not all(isinstance(v, str) for v in parsed.values()):
                    raise SubstrateError(Code.INVALID_ARGUMENT, f"{codec.ACTOR_ENV}: not an object of strings")
                env = parsed
            actor = await self.runtime.create_actor(
                atespace, name, f"{tpl_atespace}/{tpl_name}", from_tag=from_tag, env=env
            )
            return codec.actor_to_pb(actor)

        return await self._run(context, call)

    async def SuspendActor(self, request: pb.SuspendActorRequest, context: Any) -> pb.SuspendActorResponse:
        async def call() -> pb.SuspendActorResponse:
            atespace, name = _actor_ref(request.actor)
            raw = self._header(context, codec.FIDELITY) or SnapshotFidelity.VOLUMES.value
            try:
                fidelity = SnapshotFidelity(raw)
            except ValueError as exc:
                raise SubstrateError(Code.INVALID_ARGUMENT, f"{codec.FIDELITY}: unknown fidelity {raw!r}") from exc
            actor = await self.runtime.suspend_actor(atespace, name, self._uid(context), fidelity)
            return pb.SuspendActorResponse(actor=codec.actor_to_pb(actor))

        return await self._run(context, call)

    async def PauseActor(self, request: pb.PauseActorRequest, context: Any) -> pb.PauseActorResponse:
        async def call() -> pb.PauseActorResponse:
            atespace, name = _actor_ref(request.actor)
            actor = await self.runtime.pause_actor(atespace, name, self._uid(context))
            return pb.PauseActorResponse(actor=codec.actor_to_pb(actor))

        return await self._run(context, call)

    async def ResumeActor(self, request: pb.ResumeActorRequest, context: Any) -> pb.ResumeActorResponse:
        async def call() -> pb.ResumeActorResponse:
            atespace, name = _actor_ref(request.actor)
            actor, resumed = await self.runtime.resume_actor(atespace, name, self._uid(context))
            return pb.ResumeActorResponse(actor=codec.actor_to_pb(actor), resumed=resumed)

        return await self._run(context, call)

    async def DeleteActor(self, request: pb.DeleteActorRequest, context: Any) -> pb.Actor:
        async def call() -> pb.Actor:
            atespace, name = _actor_ref(request.actor)
            uid = request.options.uid or self._uid(context)
            # the response is the Actor as it was (the simulator deletes at once: no DELETING state)
            before = await self.runtime.get_actor(atespace, name) if not uid else None
            await self.runtime.delete_actor(atespace, name, cast(str, uid or None), any_state=request.any_state)
            out = codec.actor_to_pb(before) if before is not None else pb.Actor(
                metadata=pb.ResourceMetadata(atespace=atespace, name=name, uid=uid),
                actor_template=pb.ObjectRef(),
                status=pb.ActorStatus(state=pb.ACTOR_STATE_DELETING),
            )
            out.status.state = pb.ACTOR_STATE_DELETING
            return out

        return await self._run(context, call)

    async def ListActors(self, request: pb.ListActorsRequest, context: Any) -> pb.ListActorsResponse:
        async def call() -> pb.ListActorsResponse:
            page = await self.runtime.list_actors(request.atespace or None, request.page_size, request.page_token)
            return pb.ListActorsResponse(actors=[codec.actor_to_pb(a) for a in page.items],
                                         next_page_token=page.next_page_token)

        return await self._run(context, call)

    async def ListTags(self, request: pb.ListTagsRequest, context: Any) -> pb.ListTagsResponse:
        async def call() -> pb.ListTagsResponse:
            page = await self.runtime.list_tags(request.atespace or None, request.page_size, request.page_token)
            return pb.ListTagsResponse(tags=[self._tag(t) for t in page.items], next_page_token=page.next_page_token)

        return await self._run(context, call)

    # templates ---------------------------------------------------------------------------------

    async def CreateActorTemplate(self, request: pb.CreateActorTemplateRequest, context: Any) -> pb.ActorTemplate:
        async def call() -> pb.ActorTemplate:
            t = request.actor_template
            atespace, name = _actor_ref(pb.ObjectRef(atespace=t.metadata.atespace, name=t.metadata.name),
                                        "actor_template")
            if not t.containers or not t.containers[0].image:
                raise SubstrateError(Code.INVALID_ARGUMENT, "actor_template: a container with an image is required")
            c = t.containers[0]
            made = await self.runtime.create_actor_template(
                atespace, name, c.image, command=list(c.command), args=list(c.args),
                env={e.name: e.value for e in c.env},
            )
            return codec.template_to_pb(made, storage_location=t.snapshot_config.storage_location,
                                        sandbox_config=t.sandbox_config.config_name)

        return await self._run(context, call)

    async def GetActorTemplate(self, request: pb.GetActorTemplateRequest, context: Any) -> pb.ActorTemplate:
        async def call() -> pb.ActorTemplate:
            atespace, name = _actor_ref(request.actor_template, "actor_template")
            return codec.template_to_pb(await self.runtime.get_actor_template(atespace, name))

        return await self._run(context, call)

    async def DeleteActorTemplate(self, request: pb.DeleteActorTemplateRequest, context: Any) -> pb.ActorTemplate:
        async def call() -> pb.ActorTemplate:
            atespace, name = _actor_ref(request.actor_template, "actor_template")
            t = await self.runtime.get_actor_template(atespace, name)
            await self.runtime.delete_actor_template(atespace, name, request.options.uid or t.uid)
            return codec.template_to_pb(t)

        return await self._run(context, call)

    # egress ------------------------------------------------------------------------------------

    async def _policy_response(self, context: Any, atespace: str, policy: Any) -> pb.EgressPolicy:
        self._trailer(context, policy.actor_uid)
        return codec.policy_to_pb(atespace, policy)

    def _rules(self, request: pb.CreateActorEgressPolicyRequest | pb.UpdateActorEgressPolicyRequest) -> list[Any]:
        if request.egress_policy.metadata.name not in ("", codec.EGRESS_POLICY_NAME):
            raise SubstrateError(Code.INVALID_ARGUMENT, "egress_policy: metadata.name must be 'default'")
        try:
            return [r for rule in request.egress_policy.rules for r in codec.rules_from_pb(rule)]
        except codec.UnexpectedShape as e:
            raise SubstrateError(Code.INVALID_ARGUMENT, e.message) from e

    async def CreateActorEgressPolicy(
        self, request: pb.CreateActorEgressPolicyRequest, context: Any
    ) -> pb.EgressPolicy:
        async def call() -> pb.EgressPolicy:
            atespace, actor = _actor_ref(request.actor)
            uid = self._uid(context) or (await self.runtime.get_actor(atespace, actor)).uid
            made = await self.runtime.create_egress_policy(atespace, actor, uid, self._rules(request))
            return await self._policy_response(context, atespace, made)

        return await self._run(context, call)

    async def GetActorEgressPolicy(self, request: pb.GetActorEgressPolicyRequest, context: Any) -> pb.EgressPolicy:
        async def call() -> pb.EgressPolicy:
            atespace, actor = _actor_ref(request.actor)
            return await self._policy_response(context, atespace, await self.runtime.get_egress_policy(atespace, actor))

        return await self._run(context, call)

    async def UpdateActorEgressPolicy(
        self, request: pb.UpdateActorEgressPolicyRequest, context: Any
    ) -> pb.EgressPolicy:
        async def call() -> pb.EgressPolicy:
            atespace, actor = _actor_ref(request.actor)
            uid = self._uid(context) or (await self.runtime.get_actor(atespace, actor)).uid
            made = await self.runtime.update_egress_policy(atespace, actor, uid, self._rules(request))
            return await self._policy_response(context, atespace, made)

        return await self._run(context, call)

    # tags --------------------------------------------------------------------------------------

    async def CreateTag(self, request: pb.CreateTagRequest, context: Any) -> pb.Tag:
        async def call() -> pb.Tag:
            t = request.tag
            atespace, name = _actor_ref(pb.ObjectRef(atespace=t.metadata.atespace, name=t.metadata.name), "tag")
            src_atespace, actor = _actor_ref(t.source_actor, "tag.source_actor")
            if src_atespace != atespace:
                raise SubstrateError(Code.INVALID_ARGUMENT, "tag.metadata.atespace must equal source_actor.atespace")
            uid = self._uid(context) or (await self.runtime.get_actor(atespace, actor)).uid
            made = await self.runtime.create_tag(atespace, name, actor, uid)
            self._trailer(context, made.actor_uid)
            return self._tag(made)

        return await self._run(context, call)

    async def GetTag(self, request: pb.GetTagRequest, context: Any) -> pb.Tag:
        async def call() -> pb.Tag:
            atespace, name = _actor_ref(request.tag, "tag")
            made = await self.runtime.get_tag(atespace, name)
            self._trailer(context, made.actor_uid)
            return self._tag(made)

        return await self._run(context, call)

    async def DeleteTag(self, request: pb.DeleteTagRequest, context: Any) -> pb.Tag:
        async def call() -> pb.Tag:
            atespace, name = _actor_ref(request.tag, "tag")
            await self.runtime.delete_tag(atespace, name)
            return pb.Tag(metadata=pb.ResourceMetadata(atespace=atespace, name=name))

        return await self._run(context, call)

    # workers -----------------------------------------------------------------------------------

    async def ListWorkers(self, request: pb.ListWorkersRequest, context: Any) -> pb.ListWorkersResponse:
        async def call() -> pb.ListWorkersResponse:
            page = await self.runtime.list_workers(request.page_size, request.page_token)
            return pb.ListWorkersResponse(workers=[codec.worker_to_pb(w) for w in page.items],
                                          next_page_token=page.next_page_token)

        return await self._run(context, call)


async def start_server(
    runtime: Substrate,
    address: str,
    *,
    credentials: grpc.ServerCredentials | None = None,
    interceptors: list[grpc.aio.ServerInterceptor] | None = None,
    extensions: bool = True,
) -> tuple[grpc.aio.Server, int, health.aio.HealthServicer]:
    """Start serving `runtime` as ateapi.Control at `address` (port 0: any). Returns the server,
    the bound port and the health servicer (SERVING for "" and ateapi.Control). `extensions`:
    see the module docstring."""
    # clients may ping every 10 s (runtime.substrate.keepaliveTime can be set that low for this server)
    options = [("grpc.http2.min_ping_interval_without_data_ms", 10000), ("grpc.keepalive_permit_without_calls", 1),
               ("grpc.http2.max_ping_strikes", 0)]
    server = grpc.aio.server(interceptors=interceptors or None, options=options)
    pb_grpc.add_ControlServicer_to_server(ControlService(runtime, extensions=extensions), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME), server
    )
    port = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
    await server.start()
    for service in ("", SERVICE_NAME):
        await health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    return server, port, health_servicer
