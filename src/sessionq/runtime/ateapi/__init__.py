"""The runtime over gRPC: `ateapi.Control` (proto/ateapi).

- `client.py`: `SubstrateClient`, the adapter (``runtime.kind: substrate``), a `Substrate` over
  ateapi.Control; `invoke.py`: its A2A client for an Actor's private endpoint;
- `server.py`: the server frame, any `Substrate` served as ateapi.Control (reflection, health);
  `actor_endpoint.py`: the Actors' A2A endpoints of a served runtime;
- `codec.py`: records of runtime/base.py <-> ateapi messages.
"""
