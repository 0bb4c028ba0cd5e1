"""procrastinate tasks of sessionq (installed as sessionq.jobs)."""
