"""The Substrate conformance suite: what every `Substrate` implementation must do (conftest.py)."""
