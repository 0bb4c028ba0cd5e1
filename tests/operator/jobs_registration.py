"""sessionq's procrastinate app with the reaper, whether or not build_app registers it yet."""

from __future__ import annotations

from procrastinate import App
from sessionq.jobs import reaper as reaper_job
from sessionq.jobs.app import build_app


def reaper_app(url: str) -> App:
    app = build_app(url, expiry=False)
    if reaper_job.TASK not in app.tasks:
        reaper_job.register(app)
    return app
