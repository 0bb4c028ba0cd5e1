"""The store's parts, one module a domain (its schema file's procedures); `sessionq.db.store.Store`
composes them into the one store every caller uses."""
