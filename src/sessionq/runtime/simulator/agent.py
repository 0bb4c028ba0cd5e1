"""Moved to `sessionq.runtime.deterministic_agent` (the example agent's process imports it without
the simulator); kept here for the simulator's callers."""

from sessionq.runtime.deterministic_agent import (
    AUTH_REQUIRED,
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    MAX_DELAY,
    TurnResult,
    evaluate,
    run_turn,
)

__all__ = [
    "AUTH_REQUIRED",
    "COMPLETED",
    "FAILED",
    "INPUT_REQUIRED",
    "MAX_DELAY",
    "TurnResult",
    "evaluate",
    "run_turn",
]
