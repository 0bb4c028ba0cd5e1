"""The sessionq command line (installed as sessionq.cli)."""
