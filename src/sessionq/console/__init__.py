"""The web console: server-rendered pages (Starlette, Jinja2; no JavaScript build step) to see and act
on Sessions, jobs, queues and workers. It reads the database through sessionq.db and acts through
the same procedures as the CLI (sessionq.db.operator_store), recording who acted in job_actions.
It imports neither the runtime implementations nor the jobs nor the composition root (a contract
of `make lint`)."""
