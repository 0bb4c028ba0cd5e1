"""Write deploy/kubernetes/monitoring/prometheusrule.yaml from deploy/prometheus/alerts.yaml: the same
rule groups as a Prometheus Operator PrometheusRule. Run it after editing the rule file
(tests/deploy/test_deploy_files.py fails while the two differ)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yaml"
RULE = ROOT / "deploy" / "kubernetes" / "monitoring" / "prometheusrule.yaml"
HEADER = """\
# GENERATED from deploy/prometheus/alerts.yaml by scripts/gen_prometheusrule.py: edit the rule file,
# then run the script. The alert rules as a Prometheus Operator PrometheusRule (needs its CRDs);
# tests/deploy checks that its groups are the rule file's.
"""


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> Any:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render() -> str:
    alerts = yaml.safe_load(ALERTS.read_text())
    doc = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "sessionq", "labels": {
            "app.kubernetes.io/name": "sessionq", "app.kubernetes.io/part-of": "sessionq",
            "app.kubernetes.io/component": "monitoring"}},
        "spec": {"groups": alerts["groups"]},
    }
    return HEADER + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True)


def main() -> int:
    RULE.write_text(render())
    print(f"wrote {RULE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
