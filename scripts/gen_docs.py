"""Regenerate what is generated from sessionq.config.KEYS: the key table of
docs/configuration.md and the typed settings, src/sessionq/config_sections.py."""

from pathlib import Path

from sessionq import config

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "configuration.md"
SECTIONS = ROOT / "src" / "sessionq" / "config_sections.py"
MARK = "| key | environment variable | default | meaning |"

text = DOC.read_text()
head = text[: text.index(MARK)]
DOC.write_text(head + config.reference_markdown())
print(f"wrote {DOC}")
SECTIONS.write_text(config.sections_module())
print(f"wrote {SECTIONS}")
