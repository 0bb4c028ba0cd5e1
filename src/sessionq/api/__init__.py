"""gRPC frontend: server wiring and one servicer module per service."""
