"""The domain: lifecycle execution, quiescence, turns, checkpoints, expiry, GC, agents, inventory."""
