"""Child process of the `read` scenario: a closed-loop gRPC client of GetSession or ListSessions.

    python -m tests.bench.read_client ADDRESS get|list REQUESTS.json --concurrency 16 \
        --start-at EPOCH --warmup 2 --seconds 10 [--channels 4] [--token TOKEN]

REQUESTS.json is a JSON list: session ids (get) or page tokens (list, "" for the first page);
each call takes the next one round robin. Calls start at --start-at (wall clock, so that several
client processes start together); the first --warmup seconds are not counted. Prints one JSON
object: calls, errors by status code, the measured window and every latency (seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import grpc

from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2, sessions_pb2_grpc


async def run(a: argparse.Namespace) -> dict[str, Any]:
    specs = json.loads(await asyncio.to_thread(Path(a.requests).read_text))
    if a.method == "get":
        requests: list[Any] = [sessions_pb2.GetSessionRequest(session_id=s) for s in specs]
    else:
        requests = [sessions_pb2.ListSessionsRequest(page=common_pb2.PageRequest(limit=a.limit, page_token=t))
                    for t in specs]
    metadata = (("authorization", f"Bearer {a.token}"),) if a.token else None
    # each channel its own TCP connection (channels of one process share one otherwise): with several
    # API processes on one port, the kernel spreads connections, not calls
    channels = [grpc.aio.insecure_channel(a.address, options=[("grpc.use_local_subchannel_pool", 1)])
                for _ in range(a.channels)]
    stubs = [sessions_pb2_grpc.SessionServiceStub(c) for c in channels]
    calls = [s.GetSession if a.method == "get" else s.ListSessions for s in stubs]
    for c in channels:
        await c.channel_ready()
    delay = a.start_at - time.time()
    if delay > 0:
        await asyncio.sleep(delay)
    t0 = time.monotonic()
    measure_from = t0 + a.warmup
    end = measure_from + a.seconds
    latencies: list[float] = []
    codes: Counter[str] = Counter()
    n_req = len(requests)

    async def client(i: int) -> None:
        call = calls[i % len(calls)]
        k = i * 7919
        while True:
            started = time.monotonic()
            if started >= end:
                return
            req = requests[k % n_req]
            k += 1
            try:
                await call(req, metadata=metadata, timeout=30)
                code = "OK"
            except grpc.aio.AioRpcError as e:
                code = e.code().name
            done = time.monotonic()
            if started >= measure_from:
                latencies.append(done - started)
                codes[code] += 1

    await asyncio.gather(*(client(i) for i in range(a.concurrency)))
    window = time.monotonic() - measure_from
    for c in channels:
        await c.close()
    return {"calls": sum(codes.values()), "codes": dict(codes), "window_seconds": window, "latencies": latencies}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("address")
    p.add_argument("method", choices=("get", "list"))
    p.add_argument("requests")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--channels", type=int, default=4)
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--start-at", type=float, default=0.0)
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--token", default="")
    p.add_argument("--event-loop", default="uvloop", choices=("uvloop", "asyncio"))
    a = p.parse_args()
    if a.event_loop == "uvloop":
        import uvloop

        out = uvloop.run(run(a))
    else:
        out = asyncio.run(run(a))
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
