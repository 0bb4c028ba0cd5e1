"""The `sessionq` command: server commands (up, serve, worker, migrate) and client nouns."""

from __future__ import annotations

import click
from sessionq.cli.actors import actors
from sessionq.cli.agent import agent
from sessionq.cli.checkpoint import checkpoint
from sessionq.cli.client import DEFAULT_SERVER, DEFAULT_TIMEOUT
from sessionq.cli.events import events, webhooks
from sessionq.cli.invoke import invoke
from sessionq.cli.operator import (
    between_turns,
    jobs,
    queues,
    quiescence,
    requeue,
    status,
    webhook_deliveries,
    workers,
)
from sessionq.cli.sandbox import sandbox
from sessionq.cli.server import migrate, runtime, serve, up, worker
from sessionq.cli.session import session
from sessionq.cli.tags import tags

COMPLETION = """Shell completion: eval "$(_SESSIONQ_COMPLETE=bash_source sessionq)" in ~/.bashrc (zsh: zsh_source
in ~/.zshrc; fish: _SESSIONQ_COMPLETE=fish_source sessionq > ~/.config/fish/completions/sessionq.fish)."""


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=COMPLETION)
@click.version_option(package_name="sessionq", prog_name="sessionq", message="%(prog)s %(version)s")
@click.option("--server", envvar="SESSIONQ_SERVER", metavar="HOST:PORT",
              help=f"The sessionq API (default: the client config's server, else {DEFAULT_SERVER}).")
@click.option("--token", envvar="SESSIONQ_TOKEN", metavar="TOKEN",
              help="Bearer token sent as `authorization: Bearer TOKEN` (none: the server's anonymous user).")
@click.option("--client-config", envvar="SESSIONQ_CLIENT_CONFIG",
              type=click.Path(exists=True, dir_okay=False),
              help="Client config YAML (default: ./.sessionq/client.yaml, else "
                   "~/.config/sessionq/client.yaml).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=DEFAULT_TIMEOUT,
              show_default=True, metavar="SECONDS",
              help="Per-call deadline; mutations retry the same call until it passes.")
@click.pass_context
def main(ctx: click.Context, server: str | None, token: str | None, client_config: str | None,
         timeout: float) -> None:
    """sessionq: a PostgreSQL-backed control plane for agent Sessions."""
    ctx.obj = {"server": server, "token": token, "client_config": client_config, "timeout": timeout}


for command in (up, serve, worker, migrate, runtime):
    main.add_command(command)

for command in (workers, jobs, requeue, status, quiescence, queues, between_turns):
    main.add_command(command)
main.add_command(agent)
main.add_command(session)
main.add_command(actors)
main.add_command(tags)
main.add_command(checkpoint)
main.add_command(sandbox)
main.add_command(events)
main.add_command(webhooks)
webhooks.add_command(webhook_deliveries)  # an operator command: it reads the database
# the kagent spelling: `sessionq agent session create ...` is the same group as `sessionq session ...`
agent.add_command(session)
agent.add_command(invoke)


if __name__ == "__main__":
    main()
