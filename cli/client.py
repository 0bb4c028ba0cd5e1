"""What every client command shares: the client config, the channel, calls, errors and output.

Client config lookup: --client-config, $SESSIONQ_CLIENT_CONFIG, ./.sessionq/client.yaml,
~/.config/sessionq/client.yaml ($XDG_CONFIG_HOME respected). `sessionq up` writes the last two.
A server whose port speaks TLS (server.tls) is reached with `tls: true` in the client config, its
certificate checked against the system's trusted CAs, or against `caFile` (PEM) when set.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import click
import grpc
import yaml
from google.protobuf import json_format
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

DEFAULT_SERVER = "127.0.0.1:8083"
DEFAULT_TIMEOUT = 30.0
CLIENT_CONFIG = "client.yaml"
LOCAL_CLIENT_CONFIG = Path(".sessionq") / CLIENT_CONFIG

# the status codes a mutation retries with the same request (the client contract, OP-16)
RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
ATTEMPTS = 3  # a retried call's budget is split into (at least) this many attempts
MIN_ATTEMPT = 1.0  # seconds

# gRPC core's wording when no connection could be made at all
_CONNECT_FAILURES = re.compile(
    r"failed to connect|connection refused|errors resolving|dns resolution failed|"
    r"connections to all backends failing|name resolution",
    re.IGNORECASE,
)


class CliError(click.ClickException):
    """One line on stderr, `error: ...`, exit status 1."""

    exit_code = 1

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {printable(' '.join(self.format_message().split()))}", err=True, file=file)


# What must never reach the operator's terminal raw: C0 controls (ESC starting OSC/CSI sequences,
# BEL, CR, BS...), DEL, C1 controls (0x9b is a one-byte CSI) and the Unicode characters that
# reorder text or break lines (bidirectional overrides and isolates, line and paragraph separators).
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(value: Any, *, multiline: bool = False) -> str:
    """`value` as text that is safe to print on a terminal: every control character shown as a
    visible escape (`\\x1b`, `\\x07`, `\\r`, `\\u202e`), so text from the server (names, messages, job
    arguments) cannot move the cursor, retitle the window or hide what is printed. `multiline`
    keeps newlines and tabs (free text such as an agent's answer); table cells never keep them."""
    text = str(value)

    def escape(m: re.Match[str]) -> str:
        c = m.group()
        if multiline and c in "\n\t":
            return c
        if c in _ESCAPES:
            return _ESCAPES[c]
        return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"

    return _UNSAFE.sub(escape, text)


def yaml_problem(e: yaml.YAMLError) -> str:
    """A YAML error in one line: what is wrong and where."""
    if isinstance(e, yaml.MarkedYAMLError):
        mark = e.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        return f"{e.problem or e.context or 'invalid YAML'}{where}"
    return " ".join(str(e).split())


def user_client_config() -> Path:
    """~/.config/sessionq/client.yaml (XDG_CONFIG_HOME respected); as sessionq.app.up writes it."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "sessionq" / CLIENT_CONFIG


def find_client_config(explicit: str | None) -> Path | None:
    """The client config file to read: the explicit one (option or environment), else the first
    of ./.sessionq/client.yaml and the user's that exists, else None."""
    if explicit:
        return Path(explicit)
    for path in (LOCAL_CLIENT_CONFIG, user_client_config()):
        if path.is_file():
            return path
    return None


def load_client_config(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError as e:
        raise CliError(f"cannot read the client config {path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise CliError(f"the client config {path} is not valid YAML: {yaml_problem(e)}") from None
    if not isinstance(data, dict):
        raise CliError(f"the client config {path} must be a mapping (server, user, ...)")
    return data


# -- the connection -------------------------------------------------------------------------------

S = TypeVar("S")
M = TypeVar("M", bound=Message)


@dataclass
class Client:
    """A lazily opened channel to one server, with the caller's token and per-call timeout."""

    server: str = DEFAULT_SERVER
    token: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    config_path: Path | None = None
    tls: bool = False
    ca_file: str = ""
    _channel: grpc.Channel | None = field(default=None, repr=False)
    _reached: bool = field(default=False, repr=False)

    @classmethod
    def from_options(cls, server: str | None, token: str | None, client_config: str | None,
                     timeout: float) -> Client:
        path = find_client_config(client_config)
        data = load_client_config(path)
        return cls(
            server=server or str(data.get("server") or DEFAULT_SERVER),
            token=token or (str(data["token"]) if data.get("token") else None),
            timeout=timeout,
            config_path=path,
            tls=bool(data.get("tls")) or bool(data.get("caFile")),
            ca_file=str(data.get("caFile") or ""),
        )

    @property
    def channel(self) -> grpc.Channel:
        if self._channel is None:
            if self.tls:
                self._channel = grpc.secure_channel(self.server, grpc.ssl_channel_credentials(self._roots()))
            else:
                self._channel = grpc.insecure_channel(self.server)
        return self._channel

    def _roots(self) -> bytes | None:
        """The CA certificates (PEM) the server's certificate is checked against: caFile, else the system's."""
        if not self.ca_file:
            return None
        try:
            return Path(self.ca_file).expanduser().read_bytes()
        except OSError as e:
            raise CliError(f"cannot read caFile {self.ca_file} of the client config: {e.strerror or e}") from None

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def stub(self, factory: Callable[[grpc.Channel], S]) -> S:
        return factory(self.channel)

    @property
    def metadata(self) -> list[tuple[str, str]]:
        return [("authorization", f"Bearer {self.token}")] if self.token else []

    def call_creating(self, method: Callable[..., Any], request: Message) -> Any:
        """A create call with a request id (`call_retrying`); when it may still go on, the error
        says how to follow it: the same command with the same --request-id joins it instead of
        creating another."""
        try:
            return self.call_retrying(method, request)
        except CliError as e:
            if "retry the same call" in e.message or "UNAVAILABLE" in e.message or "DEADLINE_EXCEEDED" in e.message:
                raise CliError(f"{e.message}; to follow it, run the same command with --request-id "
                               f"{request.request_id}") from None
            raise

    def call_all_pages(self, method: Callable[..., Any], request: Message, result: M, field: str) -> M:
        """Every page of a paged list call: `request.page.page_token` follows each response's
        next_page_token, and the items of `field` gather in `result`."""
        while True:
            response = self.call(method, request)
            getattr(result, field).extend(getattr(response, field))
            if not response.page.next_page_token:
                return result
            request.page.page_token = response.page.next_page_token

    def call(self, method: Callable[..., Any], request: Message, *, timeout: float | None = None) -> Any:
        """One unary call; a failure becomes a CliError with one clear line."""
        try:
            response = method(request, metadata=self.metadata, timeout=timeout or self.timeout)
        except grpc.RpcError as e:
            raise self.error(e) from None
        self._reached = True
        return response

    def call_retrying(self, method: Callable[..., Any], request: Message) -> Any:
        """The same call, repeated on UNAVAILABLE / DEADLINE_EXCEEDED until --timeout has passed.

        This is how a client drives a pending operation: the server answers UNAVAILABLE when the
        operation outlives the call, and the identical retry joins it. Each attempt gets a slice of
        the budget (a third, at least a second) so that a slow operation is followed by several
        calls. A server that was never reached is reported at once rather than retried."""
        deadline = time.monotonic() + self.timeout
        attempt = max(self.timeout / ATTEMPTS, min(self.timeout, MIN_ATTEMPT))
        delay = 0.2
        while True:
            remaining = deadline - time.monotonic()
            try:
                response = method(request, metadata=self.metadata, timeout=max(min(remaining, attempt), 0.05))
            except grpc.RpcError as e:
                unreachable = is_connection_failure(e)
                if e.code() not in RETRYABLE or (unreachable and not self._reached):
                    raise self.error(e) from None
                if not unreachable:
                    self._reached = True
                remaining = deadline - time.monotonic()
                if remaining <= delay:
                    raise self.error(e, retried=True) from None
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            self._reached = True
            return response

    def error(self, e: grpc.RpcError, *, retried: bool = False) -> CliError:
        code = e.code()
        details = (e.details() or "").strip()
        if code == grpc.StatusCode.UNAVAILABLE and is_connection_failure(e):
            return CliError(
                f"the sessionq server at {self.server} is not reachable ({connection_reason(details)}); "
                "start one with `sessionq up`, or point --server / SESSIONQ_SERVER at it"
            )
        name = code.name if code is not None else "UNKNOWN"
        line = f"{name}: {details}" if details else name
        if retried:
            line += f" (still failing after retrying for {self.timeout:g}s)"
        return CliError(" ".join(line.split()))


def is_connection_failure(e: grpc.RpcError) -> bool:
    return e.code() == grpc.StatusCode.UNAVAILABLE and bool(_CONNECT_FAILURES.search(e.details() or ""))


def connection_reason(details: str) -> str:
    low = details.lower()
    if "connection refused" in low:
        return "connection refused"
    if "resolv" in low or "lookup" in low:
        return "cannot resolve its host name"
    return " ".join(details.split()) or "no connection"


def get_client(ctx: click.Context) -> Client:
    """The Client of the root context (built on first use from the group's options)."""
    root = ctx.find_root()
    obj = root.obj if isinstance(root.obj, dict) else {}
    client = obj.get("client")
    if client is None:
        client = Client.from_options(obj.get("server"), obj.get("token"), obj.get("client_config"),
                                     float(obj.get("timeout") or DEFAULT_TIMEOUT))
        obj["client"] = client
        root.obj = obj
        root.call_on_close(client.close)
    assert isinstance(client, Client)
    return client


# -- output -----------------------------------------------------------------------------------------

F = TypeVar("F", bound=Callable[..., Any])


def output_option(f: F) -> F:
    """`-o table|json` (default table)."""
    return click.option(
        "-o", "--output", "output", type=click.Choice(["table", "json"]), default="table", show_default=True,
        help="Output format: a table, or the response message as JSON.",
    )(f)


def output_option_yaml(f: F) -> F:
    """`-o table|json|yaml` (default table)."""
    return click.option(
        "-o", "--output", "output", type=click.Choice(["table", "json", "yaml"]), default="table",
        show_default=True, help="Output format: a table, or the response message as JSON or YAML.",
    )(f)


def to_dict(message: Message) -> dict[str, Any]:
    return json_format.MessageToDict(message)


def echo_list(result: Message, field: str, output: str, table: Callable[[list[Any]], str],
              empty: str | None = None) -> None:
    """A list command's answer: the whole response as JSON, `empty` (on stderr) when there is
    nothing and it is given, or the table of the items."""
    items = list(getattr(result, field))
    if output == "json":
        print_json(result)
    elif not items and empty:
        click.echo(empty, err=True)
    else:
        click.echo(table(items))


def echo_one(response: Any, field: str, output: str, table: Callable[[list[Any]], str],
             detail: Callable[[Any], str] | None = None) -> None:
    """A response holding one `field` (a Session, a Sandbox...): as JSON, every field (`detail`
    given) or a one-row table."""
    if output == "json":
        print_json(response)
    elif detail is not None:
        click.echo(detail(getattr(response, field)))
    else:
        click.echo(table([getattr(response, field)]))


def print_json(message: Message) -> None:
    click.echo(json.dumps(to_dict(message), indent=2))  # ensure_ascii: control characters are escaped


def print_yaml(message: Message) -> None:
    # allow_unicode=False: control and other non-printable characters are written as escapes
    click.echo(yaml.safe_dump(to_dict(message), sort_keys=False, allow_unicode=False), nl=False)


def print_message(message: Message, output: str) -> None:
    """The response as JSON or YAML (`-o json|yaml`)."""
    if output == "yaml":
        print_yaml(message)
    else:
        print_json(message)


def boxed_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A table with `+----+` borders, like the kagent CLI's. Cells pass through `printable`."""
    body = [[printable(c) for c in row] for row in rows]
    headers = [printable(h) for h in headers]
    widths = [len(h) for h in headers]
    for row in body:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(cells: Sequence[str]) -> str:
        return "|" + "|".join(f" {c:<{w}} " for c, w in zip(cells, widths, strict=True)) + "|"

    out = [rule, line(list(headers)), rule]
    out += [line(row) for row in body]
    out.append(rule)
    return "\n".join(out)


def plain_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], gap: int = 3) -> str:
    """Space-aligned columns, like kubectl's. Cells pass through `printable`."""
    body = [[printable(c) for c in row] for row in rows]
    headers = [printable(h) for h in headers]
    widths = [len(h) for h in headers]
    for row in body:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    sep = " " * gap

    def line(cells: Sequence[str]) -> str:
        return sep.join(f"{c:<{w}}" for c, w in zip(cells, widths, strict=True)).rstrip()

    return "\n".join([line(list(headers)), *(line(row) for row in body)])


def has_time(t: Timestamp) -> bool:
    return bool(t.seconds or t.nanos)


def fmt_time(t: Timestamp) -> str:
    """`2026-08-31T15:02:10Z` (empty when unset)."""
    if not has_time(t):
        return ""
    return t.ToDatetime(tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fmt_age(t: Timestamp, now: datetime | None = None) -> str:
    """kubectl-style age: 45s, 11m, 2h, 3d (`<unknown>` when unset)."""
    if not has_time(t):
        return "<unknown>"
    now = now or datetime.now(UTC)
    seconds = max(0, int((now - t.ToDatetime(tzinfo=UTC)).total_seconds()))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def strip_prefix(value: str, prefix: str) -> str:
    return value[len(prefix):] if value.startswith(prefix) else value


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """`90s`, `30m`, `1h`, `1h30m`, `7d` -> seconds; ValueError when malformed."""
    value = text.strip().lower()
    pos = 0
    total = 0.0
    for m in _DURATION.finditer(value):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if not value or pos != len(value):
        raise ValueError(f"{text!r} is not a duration like 90s, 30m, 1h or 1h30m")
    return total


class DurationType(click.ParamType):
    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, int | float):
            return float(value)
        try:
            seconds = parse_duration(str(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)
        if seconds <= 0:
            self.fail(f"{value!r} must be longer than zero", param, ctx)
        return seconds


DURATION = DurationType()
