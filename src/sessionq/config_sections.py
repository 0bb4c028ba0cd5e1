"""The typed sections of the configuration: one frozen dataclass per section of the keys.

Generated from sessionq.config.KEYS by `python scripts/gen_docs.py`: do not edit
(tests/test_config.py checks that it is current). It imports nothing of sessionq.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class RuntimeSubstrateTlsSettings:
    """runtime.substrate.tls.*"""

    enabled: bool  # runtime.substrate.tls.enabled
    ca_file: str  # runtime.substrate.tls.caFile
    cert_file: str  # runtime.substrate.tls.certFile
    key_file: str  # runtime.substrate.tls.keyFile
    server_name: str  # runtime.substrate.tls.serverName

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> RuntimeSubstrateTlsSettings:
        return cls(
            enabled=values["runtime.substrate.tls.enabled"],
            ca_file=values["runtime.substrate.tls.caFile"],
            cert_file=values["runtime.substrate.tls.certFile"],
            key_file=values["runtime.substrate.tls.keyFile"],
            server_name=values["runtime.substrate.tls.serverName"],
        )


@dataclass(frozen=True)
class ServerTlsSettings:
    """server.tls.*"""

    cert_file: str  # server.tls.certFile
    key_file: str  # server.tls.keyFile

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> ServerTlsSettings:
        return cls(
            cert_file=values["server.tls.certFile"],
            key_file=values["server.tls.keyFile"],
        )


@dataclass(frozen=True)
class A2aPushSettings:
    """a2a.push.*"""

    allow_private_targets: bool  # a2a.push.allowPrivateTargets
    timeout: float  # a2a.push.timeout
    concurrency: int  # a2a.push.concurrency
    max_attempts: int  # a2a.push.maxAttempts

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> A2aPushSettings:
        return cls(
            allow_private_targets=values["a2a.push.allowPrivateTargets"],
            timeout=values["a2a.push.timeout"],
            concurrency=values["a2a.push.concurrency"],
            max_attempts=values["a2a.push.maxAttempts"],
        )


@dataclass(frozen=True)
class A2aStreamSettings:
    """a2a.stream.*"""

    fallback_poll: float  # a2a.stream.fallbackPoll
    max_per_user: int  # a2a.stream.maxPerUser

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> A2aStreamSettings:
        return cls(
            fallback_poll=values["a2a.stream.fallbackPoll"],
            max_per_user=values["a2a.stream.maxPerUser"],
        )


@dataclass(frozen=True)
class RuntimeSimulatorSettings:
    """runtime.simulator.*"""

    workers: int  # runtime.simulator.workers
    task_store_address: str  # runtime.simulator.taskStoreAddress
    serve_address: str  # runtime.simulator.serveAddress
    actor_address: str  # runtime.simulator.actorAddress
    served: bool  # runtime.simulator.served

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> RuntimeSimulatorSettings:
        return cls(
            workers=values["runtime.simulator.workers"],
            task_store_address=values["runtime.simulator.taskStoreAddress"],
            serve_address=values["runtime.simulator.serveAddress"],
            actor_address=values["runtime.simulator.actorAddress"],
            served=values["runtime.simulator.served"],
        )


@dataclass(frozen=True)
class RuntimeSubstrateSettings:
    """runtime.substrate.*"""

    address: str  # runtime.substrate.address
    tls: RuntimeSubstrateTlsSettings  # runtime.substrate.tls.*
    token_file: str  # runtime.substrate.tokenFile
    call_timeout: float  # runtime.substrate.callTimeout
    keepalive_time: float  # runtime.substrate.keepaliveTime
    actor_address_pattern: str  # runtime.substrate.actorAddressPattern
    uid_preflight: bool  # runtime.substrate.uidPreflight
    snapshot_storage: str  # runtime.substrate.snapshotStorage
    sandbox_config: str  # runtime.substrate.sandboxConfig

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> RuntimeSubstrateSettings:
        return cls(
            address=values["runtime.substrate.address"],
            tls=RuntimeSubstrateTlsSettings.from_values(values),
            token_file=values["runtime.substrate.tokenFile"],
            call_timeout=values["runtime.substrate.callTimeout"],
            keepalive_time=values["runtime.substrate.keepaliveTime"],
            actor_address_pattern=values["runtime.substrate.actorAddressPattern"],
            uid_preflight=values["runtime.substrate.uidPreflight"],
            snapshot_storage=values["runtime.substrate.snapshotStorage"],
            sandbox_config=values["runtime.substrate.sandboxConfig"],
        )


@dataclass(frozen=True)
class RuntimeProcessSettings:
    """runtime.process.*"""

    root: str  # runtime.process.root
    slots: int  # runtime.process.slots
    stop_grace: float  # runtime.process.stopGrace
    max_directory_bytes: int  # runtime.process.maxDirectoryBytes
    warm_interpreters: int  # runtime.process.warmInterpreters
    isolation: Literal["auto", "gvisor", "namespaces", "none"]  # runtime.process.isolation
    sandbox_paths: str  # runtime.process.sandboxPaths
    egress_ca_file: str  # runtime.process.egressCaFile
    memory_limit: int  # runtime.process.memoryLimit
    cpu_limit: float  # runtime.process.cpuLimit
    max_processes: int  # runtime.process.maxProcesses

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> RuntimeProcessSettings:
        return cls(
            root=values["runtime.process.root"],
            slots=values["runtime.process.slots"],
            stop_grace=values["runtime.process.stopGrace"],
            max_directory_bytes=values["runtime.process.maxDirectoryBytes"],
            warm_interpreters=values["runtime.process.warmInterpreters"],
            isolation=values["runtime.process.isolation"],
            sandbox_paths=values["runtime.process.sandboxPaths"],
            egress_ca_file=values["runtime.process.egressCaFile"],
            memory_limit=values["runtime.process.memoryLimit"],
            cpu_limit=values["runtime.process.cpuLimit"],
            max_processes=values["runtime.process.maxProcesses"],
        )


@dataclass(frozen=True)
class TelemetryOtlpSettings:
    """telemetry.otlp.*"""

    endpoint: str  # telemetry.otlp.endpoint
    protocol: Literal["grpc", "http/protobuf"]  # telemetry.otlp.protocol
    interval: float  # telemetry.otlp.interval
    insecure: bool  # telemetry.otlp.insecure

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> TelemetryOtlpSettings:
        return cls(
            endpoint=values["telemetry.otlp.endpoint"],
            protocol=values["telemetry.otlp.protocol"],
            interval=values["telemetry.otlp.interval"],
            insecure=values["telemetry.otlp.insecure"],
        )


@dataclass(frozen=True)
class TelemetryTracingSettings:
    """telemetry.tracing.*"""

    sample_ratio: float  # telemetry.tracing.sampleRatio

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> TelemetryTracingSettings:
        return cls(
            sample_ratio=values["telemetry.tracing.sampleRatio"],
        )


@dataclass(frozen=True)
class DatabaseSettings:
    """database.*"""

    url: str  # database.url
    direct_url: str  # database.directUrl
    pool_size: int  # database.poolSize
    coalesce_reads: bool  # database.coalesceReads

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> DatabaseSettings:
        return cls(
            url=values["database.url"],
            direct_url=values["database.directUrl"],
            pool_size=values["database.poolSize"],
            coalesce_reads=values["database.coalesceReads"],
        )


@dataclass(frozen=True)
class ServerSettings:
    """server.*"""

    address: str  # server.address
    console_address: str  # server.consoleAddress
    allowed_hosts: list[str]  # server.allowedHosts
    cors_origins: list[str]  # server.corsOrigins
    mcp_stateless: bool  # server.mcpStateless
    http_max_connections: int  # server.httpMaxConnections
    http_header_timeout: float  # server.httpHeaderTimeout
    tls: ServerTlsSettings  # server.tls.*
    event_loop: Literal["uvloop", "asyncio"]  # server.eventLoop
    processes: int  # server.processes

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> ServerSettings:
        return cls(
            address=values["server.address"],
            console_address=values["server.consoleAddress"],
            allowed_hosts=values["server.allowedHosts"],
            cors_origins=values["server.corsOrigins"],
            mcp_stateless=values["server.mcpStateless"],
            http_max_connections=values["server.httpMaxConnections"],
            http_header_timeout=values["server.httpHeaderTimeout"],
            tls=ServerTlsSettings.from_values(values),
            event_loop=values["server.eventLoop"],
            processes=values["server.processes"],
        )


@dataclass(frozen=True)
class SessionsSettings:
    """sessions.*"""

    idle_ttl: float  # sessions.idleTtl
    max_idle_ttl: float  # sessions.maxIdleTtl
    allow_no_idle_ttl: bool  # sessions.allowNoIdleTtl
    quiescence_recovery_interval: float  # sessions.quiescenceRecoveryInterval
    claim_lifetime: float  # sessions.claimLifetime
    quiescence_workers: int  # sessions.quiescenceWorkers
    quiescence_batch: int  # sessions.quiescenceBatch
    turn_snapshots: int  # sessions.turnSnapshots
    quiescence_attempt_timeout: float  # sessions.quiescenceAttemptTimeout
    quiescence_retry_max: float  # sessions.quiescenceRetryMax
    dispatch_timeout: float  # sessions.dispatchTimeout
    keep_warm: float  # sessions.keepWarm
    paused_runtime_ttl: float  # sessions.pausedRuntimeTtl
    stalled_turn_timeout: float  # sessions.stalledTurnTimeout
    max_queued_turns: int  # sessions.maxQueuedTurns

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> SessionsSettings:
        return cls(
            idle_ttl=values["sessions.idleTtl"],
            max_idle_ttl=values["sessions.maxIdleTtl"],
            allow_no_idle_ttl=values["sessions.allowNoIdleTtl"],
            quiescence_recovery_interval=values["sessions.quiescenceRecoveryInterval"],
            claim_lifetime=values["sessions.claimLifetime"],
            quiescence_workers=values["sessions.quiescenceWorkers"],
            quiescence_batch=values["sessions.quiescenceBatch"],
            turn_snapshots=values["sessions.turnSnapshots"],
            quiescence_attempt_timeout=values["sessions.quiescenceAttemptTimeout"],
            quiescence_retry_max=values["sessions.quiescenceRetryMax"],
            dispatch_timeout=values["sessions.dispatchTimeout"],
            keep_warm=values["sessions.keepWarm"],
            paused_runtime_ttl=values["sessions.pausedRuntimeTtl"],
            stalled_turn_timeout=values["sessions.stalledTurnTimeout"],
            max_queued_turns=values["sessions.maxQueuedTurns"],
        )


@dataclass(frozen=True)
class SandboxesSettings:
    """sandboxes.*"""

    default_ttl: float  # sandboxes.defaultTtl

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> SandboxesSettings:
        return cls(
            default_ttl=values["sandboxes.defaultTtl"],
        )


@dataclass(frozen=True)
class SharesSettings:
    """shares.*"""

    max_ttl: float  # shares.maxTtl

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> SharesSettings:
        return cls(
            max_ttl=values["shares.maxTtl"],
        )


@dataclass(frozen=True)
class A2aSettings:
    """a2a.*"""

    max_message_bytes: int  # a2a.maxMessageBytes
    push: A2aPushSettings  # a2a.push.*
    stream: A2aStreamSettings  # a2a.stream.*
    public_url: str  # a2a.publicUrl
    public_grpc_address: str  # a2a.publicGrpcAddress

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> A2aSettings:
        return cls(
            max_message_bytes=values["a2a.maxMessageBytes"],
            push=A2aPushSettings.from_values(values),
            stream=A2aStreamSettings.from_values(values),
            public_url=values["a2a.publicUrl"],
            public_grpc_address=values["a2a.publicGrpcAddress"],
        )


@dataclass(frozen=True)
class WorkersSettings:
    """workers.*"""

    concurrency: int  # workers.concurrency
    poll_interval: float  # workers.pollInterval
    shutdown_timeout: float  # workers.shutdownTimeout
    stall_timeout: float  # workers.stallTimeout

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> WorkersSettings:
        return cls(
            concurrency=values["workers.concurrency"],
            poll_interval=values["workers.pollInterval"],
            shutdown_timeout=values["workers.shutdownTimeout"],
            stall_timeout=values["workers.stallTimeout"],
        )


@dataclass(frozen=True)
class JobsSettings:
    """jobs.*"""

    retention: float  # jobs.retention

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> JobsSettings:
        return cls(
            retention=values["jobs.retention"],
        )


@dataclass(frozen=True)
class MetricsSettings:
    """metrics.*"""

    enabled: bool  # metrics.enabled
    address: str  # metrics.address

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> MetricsSettings:
        return cls(
            enabled=values["metrics.enabled"],
            address=values["metrics.address"],
        )


@dataclass(frozen=True)
class AuthSettings:
    """auth.*"""

    tokens: dict[str, str]  # auth.tokens
    admins: list[str]  # auth.admins
    namespaces: dict[str, list[str]]  # auth.namespaces
    anonymous_user: str  # auth.anonymousUser

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> AuthSettings:
        return cls(
            tokens=values["auth.tokens"],
            admins=values["auth.admins"],
            namespaces=values["auth.namespaces"],
            anonymous_user=values["auth.anonymousUser"],
        )


@dataclass(frozen=True)
class RuntimeSettings:
    """runtime.*"""

    kind: Literal["simulator", "substrate", "process"]  # runtime.kind
    simulator: RuntimeSimulatorSettings  # runtime.simulator.*
    substrate: RuntimeSubstrateSettings  # runtime.substrate.*
    process: RuntimeProcessSettings  # runtime.process.*

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> RuntimeSettings:
        return cls(
            kind=values["runtime.kind"],
            simulator=RuntimeSimulatorSettings.from_values(values),
            substrate=RuntimeSubstrateSettings.from_values(values),
            process=RuntimeProcessSettings.from_values(values),
        )


@dataclass(frozen=True)
class InventorySettings:
    """inventory.*"""

    watched_atespaces: list[str]  # inventory.watchedAtespaces
    cursor_secret: str  # inventory.cursorSecret

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> InventorySettings:
        return cls(
            watched_atespaces=values["inventory.watchedAtespaces"],
            cursor_secret=values["inventory.cursorSecret"],
        )


@dataclass(frozen=True)
class GlobalSettings:
    """global.*"""

    cluster_domain: str  # global.clusterDomain

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> GlobalSettings:
        return cls(
            cluster_domain=values["global.clusterDomain"],
        )


@dataclass(frozen=True)
class LoggingSettings:
    """logging.*"""

    format: Literal["json", "text"]  # logging.format
    level: Literal["debug", "info", "warning", "error"]  # logging.level

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> LoggingSettings:
        return cls(
            format=values["logging.format"],
            level=values["logging.level"],
        )


@dataclass(frozen=True)
class EventsSettings:
    """events.*"""

    retention: float  # events.retention
    expiring_soon_lead: float  # events.expiringSoonLead

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> EventsSettings:
        return cls(
            retention=values["events.retention"],
            expiring_soon_lead=values["events.expiringSoonLead"],
        )


@dataclass(frozen=True)
class WebhooksSettings:
    """webhooks.*"""

    allow_private_targets: bool  # webhooks.allowPrivateTargets
    allow_loopback: bool  # webhooks.allowLoopback
    timeout: float  # webhooks.timeout
    max_attempts: int  # webhooks.maxAttempts
    disable_after_failures: int  # webhooks.disableAfterFailures

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> WebhooksSettings:
        return cls(
            allow_private_targets=values["webhooks.allowPrivateTargets"],
            allow_loopback=values["webhooks.allowLoopback"],
            timeout=values["webhooks.timeout"],
            max_attempts=values["webhooks.maxAttempts"],
            disable_after_failures=values["webhooks.disableAfterFailures"],
        )


@dataclass(frozen=True)
class TelemetrySettings:
    """telemetry.*"""

    otlp: TelemetryOtlpSettings  # telemetry.otlp.*
    tracing: TelemetryTracingSettings  # telemetry.tracing.*

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> TelemetrySettings:
        return cls(
            otlp=TelemetryOtlpSettings.from_values(values),
            tracing=TelemetryTracingSettings.from_values(values),
        )


class Sections:
    """The sections of sessionq.config.Settings, as typed attributes."""

    database: DatabaseSettings
    server: ServerSettings
    sessions: SessionsSettings
    sandboxes: SandboxesSettings
    shares: SharesSettings
    a2a: A2aSettings
    workers: WorkersSettings
    jobs: JobsSettings
    metrics: MetricsSettings
    auth: AuthSettings
    runtime: RuntimeSettings
    inventory: InventorySettings
    global_: GlobalSettings
    logging: LoggingSettings
    events: EventsSettings
    webhooks: WebhooksSettings
    telemetry: TelemetrySettings

    def _set_sections(self, values: Mapping[str, Any]) -> None:
        """Set every section from the values by key path (Settings is frozen)."""
        object.__setattr__(self, "database", DatabaseSettings.from_values(values))
        object.__setattr__(self, "server", ServerSettings.from_values(values))
        object.__setattr__(self, "sessions", SessionsSettings.from_values(values))
        object.__setattr__(self, "sandboxes", SandboxesSettings.from_values(values))
        object.__setattr__(self, "shares", SharesSettings.from_values(values))
        object.__setattr__(self, "a2a", A2aSettings.from_values(values))
        object.__setattr__(self, "workers", WorkersSettings.from_values(values))
        object.__setattr__(self, "jobs", JobsSettings.from_values(values))
        object.__setattr__(self, "metrics", MetricsSettings.from_values(values))
        object.__setattr__(self, "auth", AuthSettings.from_values(values))
        object.__setattr__(self, "runtime", RuntimeSettings.from_values(values))
        object.__setattr__(self, "inventory", InventorySettings.from_values(values))
        object.__setattr__(self, "global_", GlobalSettings.from_values(values))
        object.__setattr__(self, "logging", LoggingSettings.from_values(values))
        object.__setattr__(self, "events", EventsSettings.from_values(values))
        object.__setattr__(self, "webhooks", WebhooksSettings.from_values(values))
        object.__setattr__(self, "telemetry", TelemetrySettings.from_values(values))
