"""The composition root: process wiring for up, serve and worker. Only the CLI imports it."""
