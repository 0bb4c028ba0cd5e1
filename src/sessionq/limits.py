"""Message size limits shared by the control plane and the agent kit (no imports: an Actor's
process loads it without sessionq.config and its YAML parser)."""

from __future__ import annotations

__all__ = ["GRPC_DEFAULT_LIMIT", "MESSAGE_COPIES", "MIB", "grpc_message_limit"]

MIB = 1024 * 1024
# a task store update of one turn carries the user's message several times (the task's history, its
# status message, the recorded event, an artifact): the API's gRPC receive limit and the Actors' task
# store channel accept this many admitted messages plus room for the rest of the task
MESSAGE_COPIES = 8
GRPC_DEFAULT_LIMIT = 4 * MIB  # grpcio's default receive limit


def grpc_message_limit(max_message_bytes: int) -> int:
    """The gRPC message size limit of channels that carry task store updates of admitted messages
    (a2a.maxMessageBytes): never below grpcio's default of 4 MiB."""
    return max(GRPC_DEFAULT_LIMIT, MESSAGE_COPIES * max_message_bytes + MIB)
