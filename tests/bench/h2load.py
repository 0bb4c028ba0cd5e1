"""A cheap gRPC load generator for the `read` scenario: nghttp2's `h2load` (Debian `nghttp2-client`).

The Python client (`read_client.py`) spends 0.15-0.35 ms of CPU per call; on a 2-core machine
that shares its cores with the API processes and PostgreSQL, that is a fifth of a GetSession and
caps what several API processes can show. h2load is C and costs a few hundredths of a ms per call.

It sends gRPC unary calls as plain HTTP/2 POSTs: `content-type: application/grpc`, `te: trailers`,
the caller's `authorization`, and one prepared body (the length-prefixed request message), so
every call of a run is the same request. h2load knows HTTP statuses, not gRPC's (a gRPC error is
an HTTP 200 whose trailers carry grpc-status), so the calls are checked twice over:

- before and after the run the same request (same message, same metadata) goes through the Python
  client and must answer OK; its answer's length on the wire (5 + the message) is `L`;
- an error answer carries no message (trailers only) and every OK answer to the same request is the
  same message, so the DATA bytes h2load received count the OK answers exactly: every call
  succeeded iff data bytes == calls x L (up to what calls in flight at the stop received; run without h2load's warm-up, which counts warm-up bytes
  with the measured calls; the warm-up is cut from the per-request log instead).
"""

from __future__ import annotations

import re
import shutil
import struct
from pathlib import Path
from typing import Any

from google.protobuf.message import Message

from tests.bench.common import summary_ms


def binary() -> str | None:
    return shutil.which("h2load")


def grpc_frame(message: Message) -> bytes:
    """One gRPC length-prefixed message: not compressed (0), 4-byte big-endian length, the bytes."""
    data = message.SerializeToString()
    return b"\0" + struct.pack(">I", len(data)) + data


def command(h2load: str, address: str, path: str, body: Path, token: str, *, connections: int, streams: int,
            seconds: float, log_file: Path) -> list[str]:
    """`connections` TCP connections (each its own accept, so SO_REUSEPORT spreads them), `streams`
    calls in flight on each (closed loop), for `seconds`, one thread."""
    args = [h2load, "-D", f"{round(seconds * 1000)}ms", "-c", str(connections), "-m", str(streams), "-t", "1",
            "-H", "content-type: application/grpc", "-H", "te: trailers", "-d", str(body),
            "--log-file", str(log_file)]
    if token:
        args += ["-H", f"authorization: Bearer {token}"]
    return [*args, f"http://{address}{path}"]


_DONE = re.compile(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
                   r"(\d+) errored, (\d+) timeout")
_DATA = re.compile(r"^traffic: .*\((\d+)\) data$", re.MULTILINE)


def parse(stdout: str, log_file: Path, answer_bytes: int, warmup: float, seconds: float) -> dict[str, Any]:
    """calls/s and latencies of the window [first request + warmup, + seconds) from the per-request
    log; the gRPC check over the whole run from h2load's totals (see the module docstring)."""
    done = _DONE.search(stdout)
    data = _DATA.search(stdout)
    if not done or not data:
        raise RuntimeError(f"h2load's output is not what this parser knows:\n{stdout[-2000:]}")
    started, total_done, succeeded = int(done.group(2)), int(done.group(3)), int(done.group(4))
    data_bytes = int(data.group(1))
    rows = []
    for line in log_file.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3:
            rows.append((int(parts[0]), int(parts[1]), int(parts[2])))
    if not rows:
        raise RuntimeError("h2load logged no request")
    t0 = min(r[0] for r in rows)
    lo, hi = t0 + warmup * 1e6, t0 + (warmup + seconds) * 1e6
    window = [r for r in rows if lo <= r[0] < hi]
    http_not_ok = sum(1 for r in window if r[1] != 200)
    ok_answers = data_bytes // answer_bytes if answer_bytes > 0 else 0
    # calls still in flight when h2load stopped are not done; one may have received part of its answer
    exact = (answer_bytes > 0 and succeeded == total_done
             and total_done * answer_bytes <= data_bytes < (started + 1) * answer_bytes)
    codes = {"OK": len(window)} if exact and not http_not_ok else {
        "OK (estimated from data bytes)": min(ok_answers, len(window)),
        "not OK": len(window) - min(ok_answers, len(window))}
    return {"calls": len(window), "window_seconds": seconds, "codes": codes,
            **summary_ms([r[2] / 1e6 for r in window]),
            "h2load": {"done": total_done, "succeeded_http": succeeded, "data_bytes": data_bytes,
                       "answer_bytes": answer_bytes, "every_call_ok": exact and not http_not_ok}}
