"""The adapter: a `Substrate` over `ateapi.Control` (grpcio aio) -- ``runtime.kind: substrate``.

Every `Substrate` method is one RPC (or two, said below); a non-OK status becomes a
`SubstrateError` with the `Code` of the same name (one to one). UNAVAILABLE and DEADLINE_EXCEEDED
are uncertain outcomes, exactly like the simulator's lost response: the executor inspects and
retries; the exception is an UNAVAILABLE call that found no connection (refused, unreachable, the
name not resolved) or a mutation whose UID preflight read failed: `SubstrateError.not_sent`, nothing
was issued. A response this client cannot read (no status, an unknown enum number, an empty uid)
raises INTERNAL with the field named (codec.UnexpectedShape), never anything else.

| method | RPC |
| --- | --- |
| create/get/delete_actor_template | CreateActorTemplate / GetActorTemplate / DeleteActorTemplate (options.uid) |
| create_actor | CreateActor (source_tag; env but the credential in ``x-sessionq-actor-env``) |
| get_actor | GetActor |
| suspend/resume/pause_actor | SuspendActor / ResumeActor / PauseActor (UID precondition, see below) |
| delete_actor | DeleteActor (any_state, options.uid) |
| create/get_egress_policy | CreateActorEgressPolicy / GetActorEgressPolicy |
| update_egress_policy | GetActorEgressPolicy, then UpdateActorEgressPolicy with its uid + version |
| create/get/delete_tag | CreateTag (scope ATESPACE) / GetTag / DeleteTag |
| list_actors / list_workers / list_tags | ListActors / ListWorkers / ListTags (page_size, page_token passed through) |
| invoke | A2A SendMessage to the Actor's private endpoint (`invoke.py`) |
| cancel_turn | A2A CancelTask to the Actor's private endpoint |

UID preconditions: ateapi's Suspend/Resume/Pause/CreateTag/egress requests carry no UID, so the
adapter sends the recorded UID in the ``x-sessionq-expect-uid`` header (the served simulator checks
it) and, with ``uid_preflight`` (the default for a real Substrate), first reads the Actor and
refuses with FAILED_PRECONDITION when its UID differs (clause Q-11: a same-name replacement is never
adopted; the window between the read and the call is the real Substrate's to close).

Credentials: TLS (CA, client certificate and key for mTLS, server name override) on the channel; a
bearer token read from a file on every call whose modification time changed (projected
service-account tokens rotate). A call refused for credentials (UNAUTHENTICATED,
PERMISSION_DENIED, a TLS handshake failure) logs one line naming the cause until a call succeeds
again; the operation stays pending (those codes are retryable for the executor).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc

from sessionq import telemetry
from sessionq._pb.ateapi import ateapi_pb2 as pb
from sessionq._pb.ateapi import ateapi_pb2_grpc as pb_grpc
from sessionq.runtime.ateapi import codec
from sessionq.runtime.ateapi.invoke import A2AInvoker
from sessionq.runtime.base import (
    WORKLOAD_TOKEN_ENV,
    Actor,
    ActorTemplate,
    Code,
    EgressPolicy,
    EgressRule,
    InvokeRequest,
    Page,
    SnapshotFidelity,
    SubstrateError,
    Tag,
    Worker,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

_CREDENTIAL_CODES = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
_TLS_HINTS = ("ssl", "handshake", "certificate", "tls")
# what grpc-core says when an UNAVAILABLE call found no connection to send on (the channel could not
# connect, or is backing off after failing to): the request never left this process
_NO_CONNECTION_HINTS = ("failed to connect to all addresses", "connection refused", "dns resolution failed",
                        "no route to host", "network is unreachable")


def _not_sent(e: grpc.aio.AioRpcError) -> bool:
    """The call certainly never reached the runtime: UNAVAILABLE without a connection."""
    details = (e.details() or "").lower()
    return e.code() == grpc.StatusCode.UNAVAILABLE and any(h in details for h in _NO_CONNECTION_HINTS)


@dataclass(frozen=True)
class SubstrateOptions:
    """How to reach a Substrate (config keys runtime.substrate.*)."""

    address: str
    tls: bool = False
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    server_name: str = ""
    token_file: str = ""
    call_timeout: float = 30.0
    keepalive_time: float = 300.0
    actor_address_pattern: str = "http://{worker_ip}:80"
    uid_preflight: bool = True
    snapshot_storage: str = "s3://sessionq-snapshots"
    sandbox_config: str = "gvisor"
    extra_channel_options: tuple[tuple[str, Any], ...] = field(default=())

    def validate(self) -> None:
        """Raise ValueError naming the key for anything that cannot work (files must be readable)."""
        if not self.address:
            raise ValueError("runtime.substrate.address: required when runtime.kind is substrate")
        if self.tls:
            for key, path in (("caFile", self.ca_file), ("certFile", self.cert_file), ("keyFile", self.key_file)):
                if path and not os.access(path, os.R_OK):
                    raise ValueError(f"runtime.substrate.tls.{key}: cannot read {path}")
            if bool(self.cert_file) != bool(self.key_file):
                raise ValueError("runtime.substrate.tls: certFile and keyFile go together (mTLS)")
        elif self.ca_file or self.cert_file or self.key_file:
            raise ValueError("runtime.substrate.tls: files are set but tls.enabled is false")
        if self.token_file and not os.access(self.token_file, os.R_OK):
            raise ValueError(f"runtime.substrate.tokenFile: cannot read {self.token_file}")
        if self.call_timeout <= 0:
            raise ValueError("runtime.substrate.callTimeout: must be positive")
        try:
            self.actor_address_pattern.format(worker_ip="10.0.0.1", atespace="a", name="n", uid="u", worker="w")
        except (KeyError, IndexError, ValueError) as e:
            raise ValueError(
                f"runtime.substrate.actorAddressPattern: {self.actor_address_pattern!r} is not a valid pattern "
                "(placeholders: {worker_ip}, {worker}, {atespace}, {name}, {uid})"
            ) from e


class TokenFile:
    """A bearer token re-read when its file changes (mtime or size)."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self._stamp: tuple[int, int] | None = None
        self._token = ""

    def token(self) -> str:
        try:
            st = self.path.stat()
        except OSError as e:
            raise SubstrateError(Code.UNAUTHENTICATED, f"cannot read the runtime token file {self.path}: {e}") from e
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            self._token = self.path.read_text().strip()
            self._stamp = stamp
        return self._token


def _read(path: str) -> bytes | None:
    return Path(path).read_bytes() if path else None


def open_channel(options: SubstrateOptions) -> grpc.aio.Channel:
    keepalive_ms = int(options.keepalive_time * 1000)
    channel_options: list[tuple[str, Any]] = [
        ("grpc.keepalive_time_ms", keepalive_ms),
        ("grpc.keepalive_timeout_ms", 20000),
        # pings only while calls are in flight: servers refuse (GOAWAY too_many_pings) idle pings by default
        ("grpc.keepalive_permit_without_calls", 0),
        *options.extra_channel_options,
    ]
    if not options.tls:
        return grpc.aio.insecure_channel(options.address, options=channel_options)
    if options.server_name:
        channel_options.append(("grpc.ssl_target_name_override", options.server_name))
    creds = grpc.ssl_channel_credentials(
        root_certificates=_read(options.ca_file),
        private_key=_read(options.key_file),
        certificate_chain=_read(options.cert_file),
    )
    return grpc.aio.secure_channel(options.address, creds, options=channel_options)


class SubstrateClient:
    """`Substrate` over ateapi.Control. `open()` before use, `close()` after."""

    def __init__(self, options: SubstrateOptions, *, invoker: A2AInvoker | None = None) -> None:
        self.options = options
        self._channel: grpc.aio.Channel | None = None
        self._stub: pb_grpc.ControlStub | None = None
        self._token = TokenFile(options.token_file) if options.token_file else None
        self._credential_problem: str | None = None
        self._invoker = invoker or A2AInvoker(options.actor_address_pattern)

    async def open(self) -> None:
        self._channel = open_channel(self.options)
        self._stub = pb_grpc.ControlStub(self._channel)
        await self._invoker.open()

    async def close(self) -> None:
        await self._invoker.close()
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    @property
    def stub(self) -> pb_grpc.ControlStub:
        if self._stub is None:
            raise SubstrateError(Code.UNAVAILABLE, "the runtime client is not open", not_sent=True)
        return self._stub

    # plumbing ------------------------------------------------------------------------------------

    def _metadata(self, extra: dict[str, str] | None = None) -> list[tuple[str, str]]:
        md = telemetry.with_traceparent(list((extra or {}).items()))  # the call's trace context, if traced
        if self._token is not None:
            md.append(("authorization", f"Bearer {self._token.token()}"))
        return md

    def _note_credentials(self, e: grpc.aio.AioRpcError) -> None:
        code, details = e.code(), e.details() or ""
        problem = None
        if code in _CREDENTIAL_CODES:
            problem = f"the runtime at {self.options.address} refused our credentials ({code.name}): {details}"
        elif code == grpc.StatusCode.UNAVAILABLE and any(h in details.lower() for h in _TLS_HINTS):
            problem = f"TLS with the runtime at {self.options.address} failed: {details}"
        elif code == grpc.StatusCode.UNAVAILABLE and self.options.tls and "socket closed" in details.lower():
            # what a server that refuses our client certificate (or its absence) looks like from here
            problem = (f"TLS with the runtime at {self.options.address} failed: it closed the connection during the"
                       " handshake (a client certificate it does not accept, or none: runtime.substrate.tls.certFile"
                       f" and keyFile): {details}")
        if problem is not None and problem != self._credential_problem:
            log.error(problem)  # once per distinct cause, until a call succeeds again
        self._credential_problem = problem or self._credential_problem

    async def _rpc(
        self,
        method: Callable[..., Any],
        request: Any,
        *,
        headers: dict[str, str] | None = None,
        with_trailers: bool = False,
    ) -> Any:
        try:
            md = self._metadata(headers)
        except SubstrateError as e:  # the token file cannot be read
            if e.message != self._credential_problem:
                log.error(e.message)
            self._credential_problem = e.message
            raise
        try:
            if with_trailers:
                call = method(request, metadata=md, timeout=self.options.call_timeout)
                response = await call
                trailers = {k: v for k, v in (await call.trailing_metadata() or ()) if isinstance(v, str)}
                result: Any = (response, trailers)
            else:
                result = await method(request, metadata=md, timeout=self.options.call_timeout)
        except grpc.aio.AioRpcError as e:
            self._note_credentials(e)
            code = Code.__members__.get(e.code().name, Code.UNKNOWN)
            raise SubstrateError(code, e.details() or e.code().name, not_sent=_not_sent(e)) from None
        if self._credential_problem is not None:
            log.info("the runtime at %s accepts our credentials again", self.options.address)
            self._credential_problem = None
        return result

    async def _check_uid(self, atespace: str, name: str, uid: str) -> None:
        """The UID preflight read; a failure of it means the mutation that follows was not sent."""
        if not self.options.uid_preflight or not uid:
            return
        try:
            actor = await self.get_actor(atespace, name)
        except SubstrateError as e:
            e.not_sent = True
            raise
        if actor.uid != uid:
            raise SubstrateError(
                Code.FAILED_PRECONDITION,
                f"actor uid mismatch for {atespace}/{name}: expected {uid}, found {actor.uid}",
            )

    # templates -----------------------------------------------------------------------------------

    async def create_actor_template(
        self,
        atespace: str,
        name: str,
        image: str,
        *,
        command: list[str] | None = None,
        args: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> ActorTemplate:
        request = pb.CreateActorTemplateRequest(actor_template=pb.ActorTemplate(
            metadata=pb.ResourceMetadata(atespace=atespace, name=name),
            containers=[codec.container(image, command, args, env)],
            snapshot_config=pb.SnapshotConfig(storage_location=self.options.snapshot_storage,
                                              preferred_fidelity=pb.SNAPSHOT_FIDELITY_VOLUMES),
            sandbox_config=pb.SandboxConfig(sandbox_class=pb.SANDBOX_CLASS_GVISOR,
                                            config_name=self.options.sandbox_config),
        ))
        return codec.template_from_pb(await self._rpc(self.stub.CreateActorTemplate, request))

    async def get_actor_template(self, atespace: str, name: str) -> ActorTemplate:
        request = pb.GetActorTemplateRequest(actor_template=codec.ref(atespace, name))
        return codec.template_from_pb(await self._rpc(self.stub.GetActorTemplate, request))

    async def delete_actor_template(self, atespace: str, name: str, uid: str) -> None:
        request = pb.DeleteActorTemplateRequest(actor_template=codec.ref(atespace, name),
                                                options=pb.DeleteOptions(uid=uid))
        await self._rpc(self.stub.DeleteActorTemplate, request)

    # actors --------------------------------------------------------------------------------------

    async def create_actor(
        self,
        atespace: str,
        name: str,
        template: str,
        *,
        from_tag: str | None = None,
        env: dict[str, str] | None = None,
    ) -> Actor:
        actor = pb.Actor(metadata=pb.ResourceMetadata(atespace=atespace, name=name),
                         actor_template=codec.split_template(template))
        if from_tag:
            actor.source_tag.CopyFrom(codec.ref(atespace, from_tag))
        # the workload credential never goes to the Substrate: the Actor gets it with each turn (invoke.py)
        env = {k: v for k, v in (env or {}).items() if k != WORKLOAD_TOKEN_ENV}
        headers = {codec.ACTOR_ENV: json.dumps(env, separators=(",", ":"))} if env else None
        return codec.actor_from_pb(await self._rpc(self.stub.CreateActor, pb.CreateActorRequest(actor=actor),
                                                   headers=headers))

    async def get_actor(self, atespace: str, name: str) -> Actor:
        return codec.actor_from_pb(
            await self._rpc(self.stub.GetActor, pb.GetActorRequest(actor=codec.ref(atespace, name)))
        )

    async def suspend_actor(
        self, atespace: str, name: str, uid: str, fidelity: SnapshotFidelity = SnapshotFidelity.VOLUMES
    ) -> Actor:
        fid = SnapshotFidelity(fidelity)
        if fid in (SnapshotFidelity.ROOTFS, SnapshotFidelity.UNSPECIFIED):
            # refused as every runtime refuses it: SuspendActor cannot ask for it (a real Substrate
            # writes the template's preferred fidelity, VOLUMES, and ignores the fidelity header)
            raise SubstrateError(
                Code.INVALID_ARGUMENT, f"snapshot fidelity {fid.value} rejected (suspending {atespace}/{name})"
            )
        await self._check_uid(atespace, name, uid)
        headers = {codec.EXPECT_UID: uid, codec.FIDELITY: fid.value}
        response = await self._rpc(self.stub.SuspendActor, pb.SuspendActorRequest(actor=codec.ref(atespace, name)),
                                   headers=headers)
        return self._actor_of(response, "SuspendActorResponse")

    async def resume_actor(self, atespace: str, name: str, uid: str) -> tuple[Actor, bool]:
        await self._check_uid(atespace, name, uid)
        response = await self._rpc(self.stub.ResumeActor, pb.ResumeActorRequest(actor=codec.ref(atespace, name)),
                                   headers={codec.EXPECT_UID: uid})
        return self._actor_of(response, "ResumeActorResponse"), bool(response.resumed)

    async def pause_actor(self, atespace: str, name: str, uid: str) -> Actor:
        await self._check_uid(atespace, name, uid)
        response = await self._rpc(self.stub.PauseActor, pb.PauseActorRequest(actor=codec.ref(atespace, name)),
                                   headers={codec.EXPECT_UID: uid})
        return self._actor_of(response, "PauseActorResponse")

    @staticmethod
    def _actor_of(response: Any, what: str) -> Actor:
        if not response.HasField("actor"):
            raise codec.UnexpectedShape(f"{what} without actor")
        return codec.actor_from_pb(response.actor)

    async def delete_actor(self, atespace: str, name: str, uid: str, *, any_state: bool = False) -> None:
        request = pb.DeleteActorRequest(actor=codec.ref(atespace, name), any_state=any_state,
                                        options=pb.DeleteOptions(uid=uid))
        await self._rpc(self.stub.DeleteActor, request, headers={codec.EXPECT_UID: uid} if uid else None)

    # egress --------------------------------------------------------------------------------------

    def _policy(self, atespace: str, rules: list[EgressRule], base: pb.EgressPolicy | None = None) -> pb.EgressPolicy:
        md = pb.ResourceMetadata(atespace=atespace, name=codec.EGRESS_POLICY_NAME)
        if base is not None:
            md.uid, md.version = base.metadata.uid, base.metadata.version
        return pb.EgressPolicy(metadata=md, rules=[codec.rule_to_pb(r) for r in rules])

    async def create_egress_policy(self, atespace: str, actor: str, uid: str, rules: list[EgressRule]) -> EgressPolicy:
        await self._check_uid(atespace, actor, uid)
        request = pb.CreateActorEgressPolicyRequest(actor=codec.ref(atespace, actor),
                                                    egress_policy=self._policy(atespace, rules))
        made, trailers = await self._rpc(self.stub.CreateActorEgressPolicy, request,
                                         headers={codec.EXPECT_UID: uid}, with_trailers=True)
        return codec.policy_from_pb(made, trailers.get(codec.ACTOR_UID_TRAILER) or uid)

    async def get_egress_policy(self, atespace: str, actor: str) -> EgressPolicy:
        request = pb.GetActorEgressPolicyRequest(actor=codec.ref(atespace, actor))
        got, trailers = await self._rpc(self.stub.GetActorEgressPolicy, request, with_trailers=True)
        uid = trailers.get(codec.ACTOR_UID_TRAILER) or ""
        if not uid:  # a real Substrate does not say which Actor: read it
            uid = (await self.get_actor(atespace, actor)).uid
        return codec.policy_from_pb(got, uid)

    async def update_egress_policy(self, atespace: str, actor: str, uid: str, rules: list[EgressRule]) -> EgressPolicy:
        await self._check_uid(atespace, actor, uid)
        current = await self._rpc(self.stub.GetActorEgressPolicy,
                                  pb.GetActorEgressPolicyRequest(actor=codec.ref(atespace, actor)))
        request = pb.UpdateActorEgressPolicyRequest(actor=codec.ref(atespace, actor),
                                                    egress_policy=self._policy(atespace, rules, current))
        made, trailers = await self._rpc(self.stub.UpdateActorEgressPolicy, request,
                                         headers={codec.EXPECT_UID: uid}, with_trailers=True)
        return codec.policy_from_pb(made, trailers.get(codec.ACTOR_UID_TRAILER) or uid)

    # tags ----------------------------------------------------------------------------------------

    async def create_tag(self, atespace: str, name: str, actor: str, uid: str) -> Tag:
        await self._check_uid(atespace, actor, uid)
        tag = pb.Tag(metadata=pb.ResourceMetadata(atespace=atespace, name=name), scope=pb.TAG_SCOPE_ATESPACE,
                     source_actor=codec.ref(atespace, actor))
        made, trailers = await self._rpc(self.stub.CreateTag, pb.CreateTagRequest(tag=tag),
                                         headers={codec.EXPECT_UID: uid}, with_trailers=True)
        return codec.tag_from_pb(made, trailers.get(codec.ACTOR_UID_TRAILER) or uid)

    async def get_tag(self, atespace: str, name: str) -> Tag:
        got, trailers = await self._rpc(self.stub.GetTag, pb.GetTagRequest(tag=codec.ref(atespace, name)),
                                        with_trailers=True)
        # a real Substrate does not name the source Actor's UID: empty (a retried checkpoint then
        # proves the tag its own from the source name, template UID and snapshot, or makes it again)
        return codec.tag_from_pb(got, trailers.get(codec.ACTOR_UID_TRAILER) or "")

    async def delete_tag(self, atespace: str, name: str) -> None:
        await self._rpc(self.stub.DeleteTag, pb.DeleteTagRequest(tag=codec.ref(atespace, name)))

    # listings ------------------------------------------------------------------------------------

    async def list_actors(self, atespace: str | None, page_size: int, page_token: str) -> Page[Actor]:
        request = pb.ListActorsRequest(atespace=atespace or "", page_size=page_size, page_token=page_token)
        response = await self._rpc(self.stub.ListActors, request)
        return Page(items=[codec.actor_from_pb(a) for a in response.actors], next_page_token=response.next_page_token)

    async def list_tags(self, atespace: str | None, page_size: int, page_token: str) -> Page[Tag]:
        request = pb.ListTagsRequest(atespace=atespace or "", page_size=page_size, page_token=page_token)
        response = await self._rpc(self.stub.ListTags, request)
        return Page(items=[codec.tag_from_pb(t, "") for t in response.tags], next_page_token=response.next_page_token)

    async def list_workers(self, page_size: int, page_token: str) -> Page[Worker]:
        request = pb.ListWorkersRequest(page_size=page_size, page_token=page_token)
        response = await self._rpc(self.stub.ListWorkers, request)
        return Page(items=[codec.worker_from_pb(w) for w in response.workers],
                    next_page_token=response.next_page_token)

    # health --------------------------------------------------------------------------------------

    async def check_health(self, timeout: float = 2.0) -> str | None:
        """None when the runtime answers its health service with SERVING, else why not."""
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        if self._channel is None:
            return "the runtime client is not open"
        stub = health_pb2_grpc.HealthStub(self._channel)
        try:
            response = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout,
                                        metadata=self._metadata())
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.UNIMPLEMENTED:
                return None  # no health service: an answer at all is enough
            self._note_credentials(e)
            return f"{e.code().name}: {e.details()}"
        except SubstrateError as e:
            return e.message
        if response.status != health_pb2.HealthCheckResponse.SERVING:
            return f"health status {health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)}"
        return None

    # the Actor's private A2A endpoint ------------------------------------------------------------

    async def invoke(self, atespace: str, name: str, uid: str, request: InvokeRequest) -> None:
        """A2A SendMessage to the Actor's endpoint (invoke.py). When the address depends on where
        the Actor runs, the Actor is read first (and its UID checked); otherwise the endpoint
        checks the UID sent in the message's metadata."""
        actor = None
        if self._invoker.needs_actor():
            actor = await self.get_actor(atespace, name)
            if actor.uid != uid:
                raise SubstrateError(
                    Code.FAILED_PRECONDITION,
                    f"actor uid mismatch for {atespace}/{name}: expected {uid}, found {actor.uid}",
                )
        await self._invoker.invoke(atespace, name, uid, request, actor)

    async def cancel_turn(
        self, atespace: str, name: str, uid: str, session_id: str, task_id: str, *, credential: str | None = None
    ) -> None:
        """A2A CancelTask to the Actor's endpoint (invoke.py); idempotent. When the address depends on
        where the Actor runs, the Actor is read first: NOT_FOUND when it does not exist,
        FAILED_PRECONDITION for another UID, nothing to do when it is not running."""
        actor = None
        if self._invoker.needs_actor():
            actor = await self.get_actor(atespace, name)
            if actor.uid != uid:
                raise SubstrateError(
                    Code.FAILED_PRECONDITION,
                    f"actor uid mismatch for {atespace}/{name}: expected {uid}, found {actor.uid}",
                )
        await self._invoker.cancel(atespace, name, uid, session_id, task_id, actor, credential=credential)
