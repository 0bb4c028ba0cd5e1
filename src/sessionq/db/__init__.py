"""Connections, the stores (the only callers of the database), migrations, the embedded server."""
