"""An Actor's program for tests/process/test_taskstore_forward.py: from inside its sandbox it calls
the task store's forwarder ($SESSIONQ_TASKSTORE_ADDRESS) with gRPC, a TaskStoreService method and
other paths of sessionq's API, sends it a plain HTTP/1 request, and writes what each got to
``forward.json`` in its durable directory; then it sleeps."""

import json
import os
import pathlib
import socket
import time

import grpc

address = os.environ["SESSIONQ_TASKSTORE_ADDRESS"]
report: dict[str, object] = {}
channel = grpc.insecure_channel(address)
for method in ("/kagent.api.v1alpha1.TaskStoreService/GetTask", "/kagent.api.v1alpha1.SessionService/GetSession",
               "/grpc.health.v1.Health/Check", "/a2a.v1.A2AService/SendMessage",
               "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"):
    try:
        answer = channel.unary_unary(method)(b"probe", metadata=(("authorization", "Bearer sqw.t.probe"),), timeout=10)
        report[method] = {"code": "OK", "answer": answer.decode(errors="replace")}
    except grpc.RpcError as exc:
        report[method] = {"code": exc.code().name, "details": exc.details()}
channel.close()
host, port = address.rsplit(":", 1)
try:
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.settimeout(10)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: api\r\nConnection: close\r\n\r\n")
        got = b""
        try:
            while chunk := s.recv(4096):
                got += chunk
        except OSError:
            pass
    report["http1"] = got.decode("latin-1")[:200]
except OSError as exc:
    report["http1"] = f"error {type(exc).__name__}"
# written whole, then renamed: the test reads the file as soon as it exists
out = pathlib.Path(os.environ["SESSIONQ_DATA_DIR"], "forward.json")
out.with_suffix(".tmp").write_text(json.dumps(report))
out.with_suffix(".tmp").replace(out)
time.sleep(3600)
