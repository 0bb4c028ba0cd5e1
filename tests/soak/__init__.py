"""The fault and soak harness (`python -m tests.soak`, `make soak`); see README.md."""
