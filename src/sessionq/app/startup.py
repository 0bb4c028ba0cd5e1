"""The common failures at start (an address in use, a data directory that cannot be used, a
second `up` in one directory), each told in one line by the CLI instead of a traceback."""

from __future__ import annotations

import errno
import socket

from sessionq.config import ConfigError, Settings
from sessionq.oneport import tls_context


class StartupError(Exception):
    """A common failure at start (an address in use, a data directory that cannot be used, a
    second `up` in one directory), told in one line by the CLI instead of a traceback."""


def _in_use(address: str) -> bool:
    """Whether a listener holds HOST:PORT (gRPC's bind error does not say why it failed)."""
    host, _, port = address.rpartition(":")
    try:
        infos = socket.getaddrinfo(host.strip("[]") or None, int(port), type=socket.SOCK_STREAM)
    except (OSError, ValueError):
        return False
    for family, kind, proto, _name, sockaddr in infos:
        with socket.socket(family, kind, proto) as probe:
            try:
                probe.bind(sockaddr)
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    return True
    return False


def why_failed(e: BaseException, address: str | None = None) -> str:
    if (isinstance(e, OSError) and e.errno == errno.EADDRINUSE) or "address already in use" in str(e).lower():
        return "the address is in use"
    if address is not None and "failed to bind" in str(e).lower() and _in_use(address):
        return "the address is in use"
    if isinstance(e, OSError) and e.strerror:
        return e.strerror.lower()
    return " ".join(str(e).split()) or type(e).__name__


def listen_error(what: str, key: str, address: str, e: BaseException) -> StartupError:
    why = why_failed(e, address)
    return StartupError(f"cannot listen on {address} for {what}: {why} (another sessionq, or another program,"
                        f" may use it; set {key} to another HOST:PORT)")


def check_tls_files(settings: Settings) -> None:
    """server.tls's certificate and key must be readable and a pair before anything starts."""
    tls = settings.server.tls
    if tls.cert_file:
        try:
            tls_context(tls.cert_file, tls.key_file)
        except ConfigError as e:
            raise StartupError(f"invalid configuration: {e}") from None
