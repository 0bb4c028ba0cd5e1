"""`sessionq agent invoke`: send one message to a Session's agent and print the answer."""

from __future__ import annotations

import uuid

import click
from a2a.types import a2a_pb2, a2a_pb2_grpc
from sessionq.cli.client import CliError, get_client, output_option, print_json, printable

from sessionq._pb.kagent.api.v1alpha1 import sessions_pb2, sessions_pb2_grpc


def answer_text(task: a2a_pb2.Task) -> str:
    """The answer's text parts, safe for the terminal (lines and tabs kept, control sequences shown
    as escapes)."""
    return printable("\n".join(p.text for p in task.status.message.parts if p.text), multiline=True)


# exit statuses of `agent invoke` (errors: 1; bad arguments: 2)
EXIT_TURN_ENDED_BADLY = 3  # the turn ended FAILED, REJECTED or CANCELED
EXIT_TURN_STILL_RUNNING = 4  # the turn was still running when the call's deadline came
ENDED_BADLY = {"FAILED", "REJECTED", "CANCELED", "CANCELLED"}
RUNNING = {"WORKING", "SUBMITTED", "UNSPECIFIED"}


@click.command(epilog="Exit status: 0 when the turn completed (or waits for input: INPUT_REQUIRED, AUTH_REQUIRED);"
                      f" {EXIT_TURN_ENDED_BADLY} when it ended FAILED, REJECTED or CANCELED;"
                      f" {EXIT_TURN_STILL_RUNNING} when it was still running at the deadline (--timeout; follow it"
                      " with its task id); 1 for an error; 2 for bad arguments.")
@click.option("--session", "session_id", required=True, help="The Session (its ID is the conversation's context ID).")
@click.option("--task", "text", required=True, help="The message to send.")
@click.option("--task-id", default="", help="Continue this task (one that waits for input).")
@output_option
@click.pass_context
def invoke(ctx: click.Context, session_id: str, text: str, task_id: str, output: str) -> None:
    """Send TEXT to the Session's agent and wait for the turn to finish. A suspended Actor is
    resumed automatically. `-o json` prints the SendMessage response (`.task.id`)."""
    client = get_client(ctx)
    session = client.call(
        sessions_pb2_grpc.SessionServiceStub(client.channel).GetSession,
        sessions_pb2.GetSessionRequest(session_id=session_id),
    ).session
    message = a2a_pb2.Message(
        message_id=str(uuid.uuid4()),
        role=a2a_pb2.ROLE_USER,
        context_id=session.id,
        task_id=task_id,
        parts=[a2a_pb2.Part(text=text)],
    )
    request = a2a_pb2.SendMessageRequest(tenant=f"{session.agent.namespace}/{session.agent.name}", message=message)
    # not retried: sending the message again would be a second turn
    try:
        response = client.call(a2a_pb2_grpc.A2AServiceStub(client.channel).SendMessage, request)
    except CliError as e:
        if not e.message.startswith("DEADLINE_EXCEEDED"):
            raise
        # the message was sent; its turn outlived the call
        click.echo(f"error: the turn was still running when --timeout ({client.timeout:g}s) passed; read it later"
                   f" in the Session's tasks (`sessionq session get {printable(session.id)}`)", err=True)
        ctx.exit(EXIT_TURN_STILL_RUNNING)
    task = response.task
    state = a2a_pb2.TaskState.Name(task.status.state).removeprefix("TASK_STATE_")
    if output == "json":
        print_json(response)
    else:
        click.echo(answer_text(task))
        if state != "COMPLETED":
            click.echo(printable(f"(task {task.id} is {state})"), err=True)
    if state in ENDED_BADLY:
        ctx.exit(EXIT_TURN_ENDED_BADLY)
    if state in RUNNING:
        ctx.exit(EXIT_TURN_STILL_RUNNING)
