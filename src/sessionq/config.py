"""Configuration: one YAML file plus environment variables, validated at start.

Keys follow the requirements' names (``sessions.idleTtl``). Every key can also be set by an
environment variable: ``SESSIONQ_`` + the key path in upper snake case, dots becoming double
underscores, e.g. ``sessions.idleTtl`` -> ``SESSIONQ_SESSIONS__IDLE_TTL``. Environment variables
win over the file. See ``docs/configuration.md`` (generated from `KEYS`) for the full list.

Code reads a value through the typed sections of `Settings`, generated from `KEYS` into
``sessionq/config_sections.py`` (``python scripts/gen_docs.py`` writes both; tests check that they
are current): ``settings.sessions.idle_ttl`` is a float, ``settings.auth.tokens`` a
``dict[str, str]``, ``settings.global_.cluster_domain`` a str (``global`` is a Python keyword).
"""

from __future__ import annotations

import keyword
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sessionq.config_sections import Sections
from sessionq.limits import GRPC_DEFAULT_LIMIT, MESSAGE_COPIES, MIB, grpc_message_limit  # noqa: F401 (re-exported)


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the key."""




_DURATION = re.compile(r"^(-?)(\d+)(?:\.(\d{1,9}))?s$")


def parse_duration(value: str, key: str = "duration") -> float:
    """Parse a protobuf JSON duration ("604800s", "0.5s") into seconds. Negative values are refused."""
    if not isinstance(value, str):
        raise ConfigError(f'{key}: expected a duration string like "60s", got {value!r}')
    m = _DURATION.match(value.strip())
    if not m:
        raise ConfigError(
            f"{key}: {value!r} is not a protobuf duration (use seconds with an 's' suffix, e.g. \"604800s\")"
        )
    if m.group(1):
        raise ConfigError(f"{key}: {value!r} is negative; durations must be zero or positive")
    frac = m.group(3) or ""
    return int(m.group(2)) + (int(frac) / 10 ** len(frac) if frac else 0.0)


def format_duration(seconds: float) -> str:
    if float(seconds).is_integer():
        return f"{int(seconds)}s"
    return f"{seconds:.9f}".rstrip("0") + "s"


def _bool(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on"):
        return True
    if isinstance(value, str) and value.lower() in ("false", "0", "no", "off", ""):
        return False
    raise ConfigError(f"{key}: expected true or false, got {value!r}")


def _int(lo: int, hi: int) -> Callable[[Any, str], int]:
    def parse(value: Any, key: str) -> int:
        try:
            n = int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key}: expected an integer, got {value!r}") from None
        if not lo <= n <= hi:
            raise ConfigError(f"{key}: {n} is outside {lo}..{hi}")
        return n

    return parse


def _str(value: Any, key: str) -> str:
    if not isinstance(value, str | int | float):
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    return str(value)


@dataclass(frozen=True)
class _Choice:
    """One of a closed set of strings (typed as their Literal)."""

    choices: tuple[str, ...]

    def __call__(self, value: Any, key: str) -> str:
        v = _str(value, key)
        if v not in self.choices:
            raise ConfigError(f"{key}: {v!r} is not one of {', '.join(self.choices)}")
        return v


def _choice(*choices: str) -> _Choice:
    return _Choice(choices)


def _address(value: Any, key: str) -> str:
    v = _str(value, key)
    _host, sep, port = v.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{key}: {v!r} is not HOST:PORT")
    return v


def _optional_address(value: Any, key: str) -> str:
    v = _str(value, key).strip()
    return _address(v, key) if v else ""


def _duration(value: Any, key: str) -> float:
    return parse_duration(value, key)


def _positive_duration(value: Any, key: str) -> float:
    d = parse_duration(value, key)
    if d <= 0:
        raise ConfigError(f"{key}: must be greater than 0s")
    return d


def _ratio(value: Any, key: str) -> float:
    try:
        ratio = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}: {str(value)[:80]!r} is not a number between 0 and 1") from None
    if not 0 <= ratio <= 1:
        raise ConfigError(f"{key}: {ratio} is not between 0 and 1")
    return ratio


def _cores(value: Any, key: str) -> float:
    try:
        cores = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}: {str(value)[:80]!r} is not a number of CPU cores") from None
    if not 0 <= cores <= 1024:
        raise ConfigError(f"{key}: {cores} is not between 0 and 1024")
    return cores


def _tokens(value: Any, key: str) -> dict[str, str]:
    if isinstance(value, str):  # env form: "token1=alice,token2=bob"
        out: dict[str, str] = {}
        for item in filter(None, (p.strip() for p in value.split(","))):
            token, sep, user = item.partition("=")
            if not sep or not token or not user:
                raise ConfigError(f"{key}: expected TOKEN=USER pairs separated by commas")
            out[token] = user
        return out
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ConfigError(f"{key}: expected a mapping of token to user name")
    return dict(value)


def _namespaces(value: Any, key: str) -> dict[str, list[str]]:
    if isinstance(value, str):  # env form: "alice=team-a|team-b,bob=kagent"
        out: dict[str, list[str]] = {}
        for item in filter(None, (p.strip() for p in value.split(","))):
            user, sep, spaces = item.partition("=")
            if not sep or not user:
                raise ConfigError(f"{key}: expected USER=NS1|NS2 pairs separated by commas")
            out[user] = [n for n in spaces.split("|") if n]
        return out
    if not isinstance(value, Mapping) or not all(isinstance(v, list) for v in value.values()):
        raise ConfigError(f"{key}: expected a mapping of user to a list of namespaces")
    return {str(k): [str(n) for n in v] for k, v in value.items()}


def _users(value: Any, key: str) -> list[str]:
    return [u for u in (value.split(",") if isinstance(value, str) else value or []) if u]


def _atespaces(value: Any, key: str) -> list[str]:
    return [u.strip() for u in (value.split(",") if isinstance(value, str) else value or []) if str(u).strip()]


def _hosts(value: Any, key: str) -> list[str]:
    names = [str(h).strip() for h in (value.split(",") if isinstance(value, str) else value or []) if str(h).strip()]
    for name in names:
        if any(c.isspace() or c in "/@?#" for c in name):
            raise ConfigError(f"{key}: {name[:80]!r} is not a host name (e.g. sessionq.example.com, *.example.com, *)")
    return names


def _origins(value: Any, key: str) -> list[str]:
    origins = [str(o).strip().rstrip("/") for o in (value.split(",") if isinstance(value, str) else value or [])
               if str(o).strip()]
    for origin in origins:
        if origin != "*" and not re.fullmatch(r"https?://[A-Za-z0-9.-]+(:\d{1,5})?|https?://\[[0-9A-Fa-f:.]+\](:\d{1,5})?",
                                              origin):
            raise ConfigError(f"{key}: {origin[:80]!r} is not an origin (scheme://host[:port], e.g. https://app.example)")
    return origins


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name)


@dataclass(frozen=True)
class Key:
    path: str
    parse: Callable[[Any, str], Any]
    default: Any
    doc: str
    # a credential (a password in a URL, tokens, an HMAC key): a server that runs the process runtime
    # takes it out of its environment at start (sessionq.app.runtimes.withhold_secrets)
    secret: bool = False

    @property
    def env(self) -> str:
        parts = [_snake(p).upper() for p in self.path.split(".")]
        return "SESSIONQ_" + "__".join(parts)

    @property
    def attribute(self) -> str:
        """The attribute of its section in the typed settings: ``sessions.idleTtl`` -> ``idle_ttl``."""
        return _snake(self.path.rpartition(".")[2]).lower()

    @property
    def annotation(self) -> str:
        """The Python type of its parsed value, as source text (the parser's return annotation)."""
        if isinstance(self.parse, _Choice):
            return "Literal[" + ", ".join(f'"{c}"' for c in self.parse.choices) + "]"
        annotation = self.parse.__annotations__["return"]
        return annotation if isinstance(annotation, str) else annotation.__name__


KEYS: tuple[Key, ...] = (
    Key("database.url", _str, "", "PostgreSQL URL; empty means the embedded server (sessionq up only).", secret=True),
    Key(
        "database.directUrl",
        _str,
        "",
        "PostgreSQL URL of the connections that need a session of their own (LISTEN, advisory-lock"
        " leadership, procrastinate's listener, migrations); empty means database.url. Set it when"
        " database.url is a pooler in transaction mode (PgBouncer): database.url then carries only"
        " single transactions, without prepared statements.",
        secret=True,
    ),
    Key("database.poolSize", _int(2, 200), 10, "Connections per process in the sessionq pool."),
    Key(
        "database.coalesceReads",
        _bool,
        True,
        "Answer GetSession calls that arrive while another is in flight with one batched query"
        " (up to 64 per statement); a call with none in flight runs alone, at once.",
    ),
    Key(
        "server.address",
        _address,
        "127.0.0.1:8083",
        "The API's one listen address: native gRPC (reflection, grpc.health.v1), gRPC-Web, the A2A agent"
        " cards and JSON-RPC and HTTP+JSON bindings, MCP at /mcp, and the HTTP health endpoints /healthz"
        " and /readyz.",
    ),
    Key(
        "server.consoleAddress",
        _optional_address,
        "",
        "HTTP listen address of the web console (empty: off; `sessionq up` serves it on 127.0.0.1:8085).",
    ),
    Key(
        "server.allowedHosts",
        _hosts,
        [],
        "Host names the HTTP side of server.address and server.consoleAddress answer to, the port"
        " ignored: names, addresses, *.example.com for its subdomains, * for any; a request naming another"
        " host in its Host header answers 400 (DNS rebinding). Empty: on a wildcard listen address any"
        " host, else localhost, 127.0.0.1, ::1, the listen address's host and a2a.publicUrl's host.",
    ),
    Key(
        "server.corsOrigins",
        _origins,
        [],
        "Browser origins (https://app.example[:port], * for any) whose pages may call the API over gRPC-Web"
        " on server.address (CORS); empty: none (same-origin pages only).",
    ),
    Key(
        "server.mcpStateless",
        _bool,
        False,
        "MCP at /mcp on server.address without sessions (kagent's KAGENT_MCP_STATELESS): every request"
        " stands alone (no server-to-client stream); invoke_agent's context_id carries a conversation.",
    ),
    Key(
        "server.httpMaxConnections",
        _int(16, 1_000_000),
        1000,
        "Open connections server.address (every protocol counted) and server.consoleAddress each accept at"
        " once; at the cap a new connection closes the oldest one still waiting for its request, else it"
        " is answered 503 and closed. Lowered to half of the file descriptors the process may"
        " open beyond 256 (its soft RLIMIT_NOFILE is raised to the hard limit at start).",
    ),
    Key(
        "server.httpHeaderTimeout",
        _positive_duration,
        15.0,
        "How long server.address waits for a new connection's first bytes and an HTTP request's head"
        " (from the connection, or the first byte of the next request), and at most between two pieces of"
        " its body; then the connection is closed. grpcio closes a gRPC connection that has not completed"
        " its HTTP/2 handshake by then.",
    ),
    Key(
        "server.tls.certFile",
        _str,
        "",
        "PEM file of server.address's TLS certificate (its chain after it); with server.tls.keyFile the"
        " port speaks TLS only, ALPN h2 (native gRPC, gRPC-Web, MCP, the A2A bindings) and http/1.1."
        " Empty: plaintext (TLS may be terminated in front of the port instead).",
    ),
    Key(
        "server.tls.keyFile",
        _str,
        "",
        "PEM file of the private key of server.tls.certFile (unencrypted); set both or neither.",
    ),
    Key(
        "server.eventLoop",
        _choice("uvloop", "asyncio"),
        "uvloop",
        "Event loop of the long-running commands (up, serve, worker): uvloop (faster; not on Windows) or asyncio.",
    ),
    Key(
        "server.processes",
        _int(0, 256),
        0,
        "API processes of `sessionq serve` on server.address (SO_REUSEPORT, supervised), each with its own"
        " database pool and LISTEN connection; 0: one per CPU. `sessionq up` runs one API process unless this is 2"
        " or more.",
    ),
    Key(
        "sessions.idleTtl",
        _duration,
        604800.0,
        "Idle expiration TTL of Sessions (protobuf duration); 0s disables it (Sandboxes still expire at"
        " their expires_at).",
    ),
    Key(
        "sessions.maxIdleTtl",
        _duration,
        0.0,
        "The longest idle TTL a Session may be given of its own (FleetService, `sessionq session create --ttl`);"
        " 0s: no maximum. sessions.idleTtl stays the default of every Session without one.",
    ),
    Key(
        "sessions.allowNoIdleTtl",
        _bool,
        False,
        "Whether a Session may be given the idle TTL 0s of its own: it never expires idle.",
    ),
    Key("sessions.quiescenceRecoveryInterval", _positive_duration, 60.0, "Quiescence recovery scan interval."),
    Key("sessions.claimLifetime", _positive_duration, 120.0, "Maximum lifetime of an execution claim (at most 120s)."),
    Key("sessions.quiescenceWorkers", _int(1, 64), 4, "Quiescence workers per worker process."),
    Key(
        "sessions.quiescenceBatch",
        _int(1, 64),
        8,
        "Idle boundaries one quiescence worker claims in one statement and suspends concurrently (a burst's"
        " concurrent runtime suspends per worker process are at most this times sessions.quiescenceWorkers).",
    ),
    Key(
        "sessions.turnSnapshots",
        _int(0, 16),
        4,
        "Settled turns per Session whose snapshots stay pinned (a tag each) so that any of them can be"
        " checkpointed or forked (sessionq.v1 TurnService); older pins are released as a newer turn settles."
        " 0 turns it off. At most 16, what Substrate keeps per Actor. Each pinned turn costs one CreateTag"
        " (and, past the window, one DeleteTag) between turns and one stored copy of the snapshot.",
    ),
    Key(
        "sessions.quiescenceAttemptTimeout",
        _positive_duration,
        120.0,
        "Bound of one attempt to suspend an idle Actor. A claim held longer with nothing recorded (its worker"
        " died) is taken over, after this bound and 10s more, by a quiescence worker that reads the Actor back.",
    ),
    Key(
        "sessions.quiescenceRetryMax",
        _positive_duration,
        30.0,
        "Longest wait between attempts at an uncertain quiescence claim (the suspend failed; the wait starts at"
        " 1s and doubles up to this).",
    ),
    Key("sessions.dispatchTimeout", _positive_duration, 600.0, "Lifetime of a turn's dispatch reservation."),
    Key(
        "sessions.keepWarm",
        _duration,
        0.0,
        "How long an Actor stays running after a turn before it may be suspended (an Agent's spec keepWarm"
        " overrides it); a turn inside the window runs on the running Actor without a resume. 0s: suspend at once.",
    ),
    Key(
        "sessions.pausedRuntimeTtl",
        _duration,
        0.0,
        "With a value above 0s, an Actor whose turn ended INPUT_REQUIRED or AUTH_REQUIRED is paused rather than"
        " suspended, and suspended with its snapshot when this passes without an answer; an answer within it"
        " resumes the paused Actor. 0s: suspend at once.",
    ),
    Key(
        "sessions.stalledTurnTimeout",
        _duration,
        3600.0,
        "A turn whose task has had no update for this long is failed as stalled (its task FAILED with the reason, its"
        " Actor suspended, the next queued turn started), checked once a minute; 0s disables it.",
    ),
    Key(
        "sessions.maxQueuedTurns",
        _int(1, 10_000),
        100,
        "Most turns that may wait on one Session behind its running turn (messages sent with busy policy enqueue or"
        " interrupt); one more is refused RESOURCE_EXHAUSTED (KAGENT_TURN_QUEUE_FULL).",
    ),
    Key(
        "sandboxes.defaultTtl",
        _positive_duration,
        3600.0,
        "Lifetime of a Sandbox created without ttl (1s to 24h, as a CreateSandbox ttl); it is deleted when it"
        " passes, whatever its activity.",
    ),
    Key(
        "shares.maxTtl",
        _duration,
        0.0,
        "Longest lifetime of a Session share; a CreateSessionShare without ttl gets it, and a longer ttl is"
        " refused. 0s: no maximum (a share created without ttl is valid until revoked or its Session deleted).",
    ),
    Key(
        "a2a.maxMessageBytes",
        _int(1024, 64 * MIB),
        MIB,
        "Largest A2A message SendMessage admits (bytes of its protobuf encoding, 1024 to 64 MiB); a larger"
        " one answers INVALID_ARGUMENT. The API's gRPC message limit and the Actors' task store channel are"
        " sized from it: 8 times it plus 1 MiB, at least 4 MiB.",
    ),
    Key(
        "a2a.push.allowPrivateTargets",
        _bool,
        False,
        "Whether A2A push notifications may go to loopback, private-range and link-local addresses (refused"
        " by default: a config naming one answers INVALID_ARGUMENT, and a delivery that resolves to one fails).",
    ),
    Key(
        "a2a.push.timeout",
        _positive_duration,
        10.0,
        "Deadline of one A2A push notification POST, all of it: resolving the host, connecting, sending and"
        " the answer's status and headers, however slowly the receiver sends them (of the answer's body at"
        " most 4 KiB is read, within the same deadline). A receiver that has not answered by then is a"
        " failed attempt, retried with backoff.",
    ),
    Key(
        "a2a.push.concurrency",
        _int(1, 256),
        4,
        "Push notification deliveries (queue `push`) a worker process runs at most at a time, out of"
        " workers.concurrency and never all of it (at most workers.concurrency - 1; a worker with"
        " workers.concurrency 1 shares its one slot): the other slots stay for lifecycle operations, turns"
        " and periodic work however slow the receivers are.",
    ),
    Key(
        "a2a.push.maxAttempts",
        _int(1, 100),
        8,
        "Attempts at one A2A push notification (retried with exponential backoff) before it is recorded failed.",
    ),
    Key(
        "a2a.stream.fallbackPoll",
        _positive_duration,
        30.0,
        "How often an open A2A stream (SendStreamingMessage, SubscribeToTask) re-reads its task without a"
        " notification. A stream wakes on NOTIFY sessionq_task through its process's one LISTEN connection and"
        " re-reads after that connection reconnects; this poll only covers a notification lost otherwise"
        " (while the LISTEN connection is down, streams poll every second).",
    ),
    Key(
        "a2a.stream.maxPerUser",
        _int(0, 1_000_000),
        100,
        "Most A2A streams one user may hold open at once in one API process (each API process of `serve`,"
        " and each replica, counts its own); the next answers RESOURCE_EXHAUSTED (gRPC), HTTP 429 (HTTP+JSON)"
        " or JSON-RPC error -32029 until one closes. 0: no limit.",
    ),
    Key(
        "a2a.publicUrl",
        _str,
        "",
        "Base URL (http://host:port) the agent cards advertise for the JSON-RPC and HTTP+JSON bindings;"
        " empty: the address the card request reached (its Host).",
    ),
    Key(
        "a2a.publicGrpcAddress",
        _str,
        "",
        "host:port the agent cards advertise for the gRPC binding; empty: server.address (a wildcard host"
        " replaced by the host the card request reached).",
    ),
    Key("workers.concurrency", _int(1, 256), 16, "Concurrent procrastinate jobs per worker process."),
    Key(
        "workers.pollInterval", _positive_duration, 5.0, "Fallback poll interval for jobs (LISTEN/NOTIFY wakes sooner)."
    ),
    Key("workers.shutdownTimeout", _duration, 30.0, "How long a draining worker waits for running jobs."),
    Key(
        "workers.stallTimeout",
        _positive_duration,
        30.0,
        "A worker whose heartbeat (every 10 s) is older than this is dead; the reaper requeues its running jobs.",
    ),
    Key(
        "jobs.retention",
        _duration,
        86400.0,
        "How long succeeded jobs are kept, with their attempts, as history (`sessionq jobs list --status"
        " succeeded`); a periodic job purges older ones in batches. 0s keeps none (deleted when they succeed).",
    ),
    Key("metrics.enabled", _bool, False, "Serve Prometheus metrics over HTTP."),
    Key("metrics.address", _address, "127.0.0.1:9464", "Metrics listen address."),
    Key("auth.tokens", _tokens, {}, "Bearer tokens mapped to user names.", secret=True),
    Key("auth.admins", _users, [], "Users who may list every creator's Sessions (all_creators)."),
    Key(
        "auth.namespaces",
        _namespaces,
        {},
        "Agent namespaces each user may use (user -> list); users not listed may use every namespace.",
    ),
    Key("auth.anonymousUser", _str, "", "User for calls without a token (set by `sessionq up`; empty: reject)."),
    Key(
        "runtime.kind",
        _choice("simulator", "substrate", "process"),
        "simulator",
        "The Substrate implementation: `simulator` (in process), `substrate` (a Substrate's ateapi.Control"
        " over gRPC at runtime.substrate.address; docs/runtime.md) or `process` (Actors are local OS processes,"
        " not isolated; one process owns them). `sessionq up` runs the process runtime unless `--runtime simulator`"
        " (it keeps `substrate`)."
    ),
    Key("runtime.simulator.workers", _int(1, 100000), 256, "Size of the simulated worker pool."),
    Key(
        "runtime.simulator.taskStoreAddress",
        _str,
        "",
        "Where simulated Actors reach the task store API (empty: this process's API, else server.address).",
    ),
    Key(
        "runtime.simulator.serveAddress",
        _address,
        "127.0.0.1:8090",
        "`sessionq runtime serve --simulator` (and `sessionq up` with runtime.simulator.served): where the"
        " simulator serves ateapi.Control (gRPC, with reflection and health).",
    ),
    Key(
        "runtime.simulator.actorAddress",
        _address,
        "127.0.0.1:8091",
        "Where the served simulator listens for its Actors' A2A endpoints (`/actors/<atespace>/<name>`).",
    ),
    Key(
        "runtime.simulator.served",
        _bool,
        True,
        "`sessionq up`: run the simulator as an ateapi.Control server and reach it through the gRPC adapter"
        " (false: the simulator in process).",
    ),
    Key(
        "runtime.substrate.address",
        _str,
        "dns:///api.ate-system.svc:443",
        "runtime.kind substrate: the gRPC target of the Substrate's ateapi.Control (HOST:PORT or a gRPC name such"
        " as dns:///HOST:PORT); the default is the Substrate API's Service in the cluster.",
    ),
    Key("runtime.substrate.tls.enabled", _bool, False, "Use TLS to the Substrate (else plaintext)."),
    Key(
        "runtime.substrate.tls.caFile",
        _str,
        "",
        "PEM file of the CAs that sign the Substrate's certificate (empty: system roots).",
    ),
    Key("runtime.substrate.tls.certFile", _str, "", "PEM client certificate for mTLS (with keyFile)."),
    Key("runtime.substrate.tls.keyFile", _str, "", "PEM private key of the client certificate (mTLS)."),
    Key(
        "runtime.substrate.tls.serverName",
        _str,
        "",
        "Name to verify in the Substrate's certificate (empty: the address host).",
    ),
    Key(
        "runtime.substrate.tokenFile",
        _str,
        "",
        "File holding a bearer token sent on every call (re-read when it changes, as projected service-account"
        " tokens rotate; empty: none).",
    ),
    Key("runtime.substrate.callTimeout", _positive_duration, 30.0, "Deadline of each call to the Substrate."),
    Key(
        "runtime.substrate.keepaliveTime",
        _positive_duration,
        300.0,
        "gRPC keepalive ping interval to the Substrate while calls are in flight; not below the server's"
        " ping enforcement (grpc-go refuses pings more often than every 5 minutes by default).",
    ),
    Key(
        "runtime.substrate.actorAddressPattern",
        _str,
        "http://{worker_ip}:80",
        "URL of an Actor's private A2A endpoint (invoke); placeholders {worker_ip}, {worker}, {atespace}, {name},"
        " {uid}.",
    ),
    Key(
        "runtime.substrate.uidPreflight",
        _bool,
        True,
        "Read the Actor before a UID-guarded call (ateapi's Suspend/Resume/Pause carry no UID) and refuse a"
        " same-name replacement; false when the server honours the x-sessionq-expect-uid header"
        " (the served simulator).",
    ),
    Key(
        "runtime.substrate.snapshotStorage",
        _str,
        "s3://sessionq-snapshots",
        "storage_location of the actor templates sessionq creates.",
    ),
    Key(
        "runtime.substrate.sandboxConfig",
        _str,
        "gvisor",
        "sandbox_config.config_name of the actor templates sessionq creates (gVisor class).",
    ),
    Key(
        "runtime.process.root",
        _str,
        "",
        "Process runtime: where durable directories, snapshots, tags and logs live (empty: ./sessionq-process).",
    ),
    Key("runtime.process.slots", _int(1, 10000), 8, "Process runtime: process slots (Actors running at once)."),
    Key(
        "runtime.process.stopGrace",
        _positive_duration,
        5.0,
        "Process runtime: time between SIGTERM and SIGKILL when an Actor's process is stopped.",
    ),
    Key(
        "runtime.process.maxDirectoryBytes",
        _int(0, 2**62),
        1 << 30,
        "Process runtime: a durable directory larger than this (apparent size: a sparse file counts whole) is not "
        "snapshotted, nor a snapshot larger than this restored (0: no limit).",
    ),
    Key(
        "runtime.process.warmInterpreters",
        _int(0, 64),
        1,
        "Process runtime: Python interpreters kept started with the agent kit imported (under gvisor and namespaces"
        " each in a warm sandbox of its own), each handed to the next Actor whose command runs a script or -m"
        " module with the runtime's interpreter (0: every Actor starts cold).",
    ),
    Key(
        "runtime.process.isolation",
        _choice("auto", "gvisor", "namespaces", "none"),
        "auto",
        "Process runtime: each Actor's sandbox: gvisor (runsc), namespaces (bubblewrap) or none (plain processes, "
        "not isolated, egress not enforced); auto: gvisor where runsc runs, else namespaces. Sandboxes need root.",
    ),
    Key(
        "runtime.process.sandboxPaths",
        _str,
        "",
        "Process runtime: extra read-only paths (separated by ':') a sandbox shows at the same path, besides "
        "/usr, the runtime's Python and the agent kit (never the runtime's root or configuration).",
    ),
    Key(
        "runtime.process.egressCaFile",
        _str,
        "",
        "Process runtime: PEM file of CA certificates the egress proxy trusts, besides the system's, when it opens"
        " TLS to an https origin for a request an Actor sent it in the clear (empty: the system's only).",
    ),
    Key(
        "runtime.process.memoryLimit",
        _int(0, 2**62),
        2 << 30,
        "Process runtime: bytes of memory one Actor's sandbox may use (its control group's limit; past it the "
        "kernel ends its largest process and the turn fails saying so). Without a writable cgroup hierarchy: "
        "the address space of each of its processes. 0: no limit; isolation none: not applied.",
    ),
    Key(
        "runtime.process.cpuLimit",
        _cores,
        2.0,
        "Process runtime: CPU cores one Actor's sandbox may use (its control group's CFS quota: a busy sandbox"
        " is throttled; under gvisor gVisor's own kernel counts too). Needs a writable cgroup hierarchy. 0: no"
        " limit; isolation none: not applied.",
    ),
    Key(
        "runtime.process.maxProcesses",
        _int(0, 1 << 22),
        512,
        "Process runtime: processes and threads one Actor's sandbox may have (RLIMIT_NPROC of its user, and under "
        "namespaces pids.max of its control group): a fork bomb stops there. 0: no limit; isolation none: not "
        "applied.",
    ),
    Key("inventory.watchedAtespaces", _atespaces, [], "Atespaces the inventory lists (empty: all)."),
    Key(
        "inventory.cursorSecret",
        _str,
        "",
        "HMAC key of inventory page tokens; set the same value on every API replica (empty: random per process).",
        secret=True,
    ),
    Key("global.clusterDomain", _str, "cluster.local", "Cluster DNS domain for generated in-cluster URLs."),
    Key("logging.format", _choice("json", "text"), "json", "Log format: JSON lines or human-readable text."),
    Key("logging.level", _choice("debug", "info", "warning", "error"), "info", "Log level."),
    Key(
        "events.retention",
        _duration,
        604800.0,
        "How long lifecycle events are kept (docs/events.md); a periodic job purges older ones in batches."
        " 0s keeps none past the next purge.",
    ),
    Key(
        "events.expiringSoonLead",
        _duration,
        3600.0,
        "How long before a Session's idle TTL ends its expiring_soon event is recorded (0s: none).",
    ),
    Key(
        "webhooks.allowPrivateTargets",
        _bool,
        False,
        "Whether webhooks may go to loopback, private-range and link-local addresses (refused by default, as A2A"
        " push: a subscription naming one answers INVALID_ARGUMENT, and a delivery that resolves to one fails).",
    ),
    Key(
        "webhooks.allowLoopback",
        _bool,
        False,
        "Whether webhooks may go to loopback addresses (127.0.0.0/8, ::1) even when private targets are refused;"
        " `sessionq up` turns it on (a local development setup).",
    ),
    Key("webhooks.timeout", _positive_duration, 10.0, "The deadline of one webhook delivery attempt, all of it."),
    Key(
        "webhooks.maxAttempts",
        _int(1, 1000),
        8,
        "Attempts at one webhook delivery (retried with a growing wait: 1, 3, 5, ... s) before it is given up.",
    ),
    Key(
        "webhooks.disableAfterFailures",
        _int(0, 1_000_000),
        50,
        "Failed delivery attempts in a row after which a subscription is disabled (0: never).",
    ),
    Key(
        "telemetry.otlp.endpoint",
        _str,
        "",
        "OTLP endpoint (host:port or http(s)://host:port) the process's OpenTelemetry metrics and traces are"
        " exported to (empty: no OpenTelemetry export; the Prometheus endpoint of metrics.enabled is independent of"
        " it). http/protobuf: the collector's base URL, to which /v1/metrics and /v1/traces are added.",
    ),
    Key(
        "telemetry.otlp.protocol",
        _choice("grpc", "http/protobuf"),
        "grpc",
        "OTLP protocol: grpc (a collector's port 4317) or http/protobuf (protobuf POSTed over HTTP, port 4318).",
    ),
    Key("telemetry.otlp.interval", _positive_duration, 60.0, "How often metrics are exported over OTLP."),
    Key("telemetry.otlp.insecure", _bool, True,
        "Export in plaintext (false: TLS with the system's roots; http/protobuf: an endpoint without a scheme"
        " gets https://)."),
    Key(
        "telemetry.tracing.sampleRatio",
        _ratio,
        0.0,
        "Share of the API's calls traced (0..1; a call whose W3C traceparent says sampled is traced whatever"
        " it is), each trace following the call through its job, the runtime calls, the settlement and the"
        " quiescence suspend it wakes; exported over OTLP to telemetry.otlp.endpoint. 0 (the default): no"
        " tracing at all.",
    ),
)
_BY_PATH = {k.path: k for k in KEYS}
SECRET_ENV = tuple(k.env for k in KEYS if k.secret)  # the environment variables that carry credentials


@dataclass(frozen=True)
class Settings(Sections):
    """The validated configuration. Read it through its typed sections (`Sections`, generated
    from `KEYS`): ``settings.sessions.claim_lifetime``. `values` holds the same values by key path,
    for tools that walk `KEYS` (``settings["sessions.idleTtl"]``)."""

    values: dict[str, Any]

    def __post_init__(self) -> None:
        missing = [k.path for k in KEYS if k.path not in self.values]
        if missing:  # every key has a value: defaults() and load() fill them all
            raise ConfigError(f"{missing[0]}: no value")
        self._set_sections(self.values)

    def __getitem__(self, path: str) -> Any:
        return self.values[path]

    def with_overrides(self, **overrides: Any) -> Settings:
        """Copy with values given by key path, e.g. with_overrides(**{"sessions.claimLifetime": 5.0})."""
        v = dict(self.values)
        for path, value in overrides.items():
            if path not in _BY_PATH:
                raise ConfigError(f"{path}: unknown configuration key")
            v[path] = value
        return Settings(v)

    def as_env(self, *paths: str) -> dict[str, str]:
        """The values of `paths` as the environment variables that set them (SESSIONQ_...), for a
        child process that loads its settings: scalars only (text, numbers, booleans)."""
        env = {}
        for path in paths:
            value = self.values[path]
            env[_BY_PATH[path].env] = ("true" if value else "false") if isinstance(value, bool) else str(value)
        return env

    @property
    def database_url(self) -> str:
        """database.url (the one key several commands also take as an option)."""
        return self.database.url

    @property
    def direct_url(self) -> str:
        """database.directUrl, or database.url when it is empty: where session-level connections go."""
        return self.database.direct_url or self.database.url


def _flatten(prefix: str, data: Mapping[str, Any], out: dict[str, Any]) -> None:
    for k, v in data.items():
        path = f"{prefix}.{k}" if prefix else str(k)
        if path in _BY_PATH:
            out[path] = v
        elif isinstance(v, Mapping):
            _flatten(path, v, out)
        else:
            raise ConfigError(f"{path}: unknown configuration key")


def load(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Load defaults, then the YAML file, then environment variables; validate every value."""
    env = os.environ if env is None else env
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except OSError as e:
            raise ConfigError(f"cannot read configuration file {path}: {e.strerror}") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"configuration file {path} is not valid YAML: {e}") from None
        if not isinstance(data, Mapping):
            raise ConfigError(f"configuration file {path}: the top level must be a mapping")
        _flatten("", data, raw)
    for key in KEYS:
        if key.env in env:
            raw[key.path] = env[key.env]
    values: dict[str, Any] = {}
    for key in KEYS:
        values[key.path] = key.parse(raw[key.path], key.path) if key.path in raw else key.default
    if values["sandboxes.defaultTtl"] > 86400:
        raise ConfigError("sandboxes.defaultTtl: must be at most 24h (a CreateSandbox ttl's own bound)")
    if bool(values["server.tls.certFile"]) != bool(values["server.tls.keyFile"]):
        raise ConfigError("server.tls: set both certFile and keyFile (TLS on) or neither (plaintext)")
    if values["sessions.claimLifetime"] > 120:
        raise ConfigError(
            "sessions.claimLifetime: must be at most 120s (a crashed executor's claim expires within two minutes)"
        )
    return Settings(values)


def defaults() -> Settings:
    return Settings({k.path: k.default for k in KEYS})


def reference_markdown() -> str:
    """The documented list of keys, defaults and environment variables."""
    lines = ["| key | environment variable | default | meaning |", "| --- | --- | --- | --- |"]
    for k in KEYS:
        d = k.default
        if k.parse in (_duration, _positive_duration):
            d = format_duration(d)
        lines.append(
            f"| `{k.path}` | `{k.env}` | `{d!r}` | {k.doc} |"
            if not isinstance(d, str)
            else f"| `{k.path}` | `{k.env}` | `{d}` | {k.doc} |"
        )
    return "\n".join(lines) + "\n"


def _section_class(section: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in section.split(".")) + "Settings"


def _section_attribute(name: str) -> str:
    attribute = _snake(name).lower()
    return attribute + "_" if keyword.iskeyword(attribute) else attribute


def sections_module() -> str:
    """The source of ``sessionq/config_sections.py``: one frozen dataclass per section of `KEYS`
    (nested sections as attributes), and `Sections`, which `Settings` extends."""
    sections: dict[str, list[tuple[str, str, str]]] = {}  # section -> (attribute, annotation, comment)
    builders: dict[str, list[tuple[str, str]]] = {}  # section -> (attribute, expression)
    for k in KEYS:
        section = k.path.rpartition(".")[0]
        sections.setdefault(section, []).append((k.attribute, k.annotation, k.path))
        builders.setdefault(section, []).append((k.attribute, f'values["{k.path}"]'))
        parts = section.split(".")
        for i in range(len(parts) - 1, 0, -1):  # a nested section is an attribute of its parent
            parent, child = ".".join(parts[:i]), ".".join(parts[: i + 1])
            entry = (_section_attribute(parts[i]), _section_class(child), f"{child}.*")
            if entry not in sections.setdefault(parent, []):
                sections[parent].append(entry)
                builders.setdefault(parent, []).append((entry[0], f"{entry[1]}.from_values(values)"))
    top = [s for s in sections if "." not in s]
    out = [
        '"""The typed sections of the configuration: one frozen dataclass per section of the keys.',
        "",
        "Generated from sessionq.config.KEYS by `python scripts/gen_docs.py`: do not edit",
        "(tests/test_config.py checks that it is current). It imports nothing of sessionq.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from collections.abc import Mapping",
        "from dataclasses import dataclass",
        "from typing import Any, Literal",
        "",
    ]
    for section in sorted(sections, key=lambda s: -s.count(".")):  # children first
        name = _section_class(section)
        out += ["", "@dataclass(frozen=True)", f"class {name}:", f'    """{section}.*"""', ""]
        out += [f"    {attribute}: {annotation}  # {comment}" for attribute, annotation, comment in sections[section]]
        out += [
            "",
            "    @classmethod",
            f"    def from_values(cls, values: Mapping[str, Any]) -> {name}:",
            "        return cls(",
            *(f"            {attribute}={expression}," for attribute, expression in builders[section]),
            "        )",
            "",
        ]
    out += [
        "",
        "class Sections:",
        '    """The sections of sessionq.config.Settings, as typed attributes."""',
        "",
        *(f"    {_section_attribute(s)}: {_section_class(s)}" for s in top),
        "",
        "    def _set_sections(self, values: Mapping[str, Any]) -> None:",
        '        """Set every section from the values by key path (Settings is frozen)."""',
        *(
            f'        object.__setattr__(self, "{_section_attribute(s)}", {_section_class(s)}.from_values(values))'
            for s in top
        ),
    ]
    return "\n".join(out) + "\n"
