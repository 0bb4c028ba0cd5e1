"""Moved to `sessionq.runtime.taskstore_client` (an Actor's process imports it without the
simulator); kept here for the simulator's callers."""

from sessionq.runtime.taskstore_client import RETRYABLE, TaskStoreClient, TaskStoreError

__all__ = ["RETRYABLE", "TaskStoreClient", "TaskStoreError"]
