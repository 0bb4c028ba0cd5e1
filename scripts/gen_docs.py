"""Regenerate the key table of docs/configuration.md from sessionq.config.KEYS."""

from pathlib import Path

from sessionq import config

DOC = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
MARK = "| key | environment variable | default | meaning |"

text = DOC.read_text()
head = text[: text.index(MARK)]
DOC.write_text(head + config.reference_markdown())
print(f"wrote {DOC}")
