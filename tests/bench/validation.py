"""Scenario `validation`: what the buf.validate interceptor (api/validation.py) costs.

Two API servers run in this process on one database: one with the interceptor, one without
(`ApiServer(validate=False)`, the baseline), measured alternately in short rounds so that both see
the same machine. Calls: GetSession of an existing Session (a read), and CreateSession retried with
the same request id (admission under the row lock answering the existing Session: the whole
request path with a database transaction, no worker needed). Closed loop, `clients` concurrent
callers over 4 channels. Reported: calls per second with and without, and their ratio (target:
at most 5 % slower, ratio >= 0.95).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import grpc

from tests.bench.common import AGENT, METADATA, NAMESPACE, TOKEN, USER, Server, ratio, say, setup_agent, table


async def _rate(address: str, make_call: Any, clients: int, seconds: float) -> float:
    chans = [grpc.aio.insecure_channel(address) for _ in range(4)]
    calls = [make_call(c) for c in chans]
    done = 0
    t_end = time.monotonic() + seconds

    async def client(i: int) -> None:
        nonlocal done
        call = calls[i % len(calls)]
        while time.monotonic() < t_end:
            await call()
            done += 1

    t0 = time.monotonic()
    await asyncio.gather(*(client(i) for i in range(clients)))
    elapsed = time.monotonic() - t0
    for c in chans:
        await c.close()
    return done / elapsed


async def run(srv: Server, log_dir: Path, quick: bool, sizes: dict[str, Any] | None = None) -> dict[str, Any]:
    from sessionq import config
    from sessionq._pb.kagent.api.v1alpha1 import common_pb2, sessions_pb2, sessions_pb2_grpc
    from sessionq.api.server import ApiServer
    from sessionq.db.store import Store

    sizes = {"clients": 16, "seconds": 1.0 if quick else 3.0, "rounds": 3 if quick else 6, **(sizes or {})}
    say("", f"== validation: the interceptor's cost, {sizes['rounds']} alternating rounds of "
            f"{sizes['seconds']} s, {sizes['clients']} clients ==")
    url = srv.fresh_database("validation")
    await setup_agent(url)
    settings = config.defaults().with_overrides(**{"auth.tokens": {TOKEN: USER}, "auth.anonymousUser": ""})
    store = await Store.open(url, pool_size=10)
    servers = {}
    for name, validate in (("with", True), ("without", False)):
        s = ApiServer(settings, store, address="127.0.0.1:0", validate=validate)
        await s.start()
        servers[name] = s
    try:
        # one Session, admitted and then marked created by hand (no worker runs here): a retry of
        # its request answers the existing Session from the row
        agent = common_pb2.ResourceReference(namespace=NAMESPACE, name=AGENT)
        create = sessions_pb2.CreateSessionRequest(request_id="bench-validation", agent=agent)
        admission = await store.admit_create(USER, create.request_id, NAMESPACE, AGENT, "")
        async with store.pool.connection() as conn:
            await conn.execute("UPDATE sessionq.sessions SET state = 'READY', operation = 'NONE' WHERE id = %s",
                               (admission.session.id,))
        get = sessions_pb2.GetSessionRequest(session_id=str(admission.session.id))

        def get_call(channel: grpc.aio.Channel) -> Any:
            stub = sessions_pb2_grpc.SessionServiceStub(channel)
            return lambda: stub.GetSession(get, metadata=METADATA, timeout=10)

        def create_call(channel: grpc.aio.Channel) -> Any:
            stub = sessions_pb2_grpc.SessionServiceStub(channel)

            return lambda: stub.CreateSession(create, metadata=METADATA, timeout=10)

        results: dict[str, Any] = {"sizes": sizes}
        rows = []
        for label, make in (("GetSession", get_call), ("CreateSession (retry)", create_call)):
            rates: dict[str, list[float]] = {"with": [], "without": []}
            for name in ("without", "with"):  # warm-up (connections, caches), not counted
                await _rate(f"127.0.0.1:{servers[name].port}", make, int(sizes["clients"]), 0.5)
            for i in range(int(sizes["rounds"])):
                for name in (("without", "with") if i % 2 == 0 else ("with", "without")):
                    address = f"127.0.0.1:{servers[name].port}"
                    rates[name].append(await _rate(address, make, int(sizes["clients"]), float(sizes["seconds"])))
            with_, without = sum(rates["with"]) / len(rates["with"]), sum(rates["without"]) / len(rates["without"])
            results[label] = {"with_per_s": round(with_, 1), "without_per_s": round(without, 1),
                              "ratio_with_over_without": ratio(with_, without), "rounds": rates}
            rows.append([label, round(without, 1), round(with_, 1), ratio(with_, without)])
        say(table("validation interceptor", ["call", "without/s", "with/s", "ratio"], rows))
        return results
    finally:
        for s in servers.values():
            await s.stop(0)
        await store.close()
