"""Offline checks of the HA deployment: the CloudNativePG Cluster and Pooler (deploy/kubernetes/postgres),
the Prometheus Operator objects (deploy/kubernetes/monitoring) and the production overlay
(deploy/overlays/production) that wires them to the API, the workers and the migration Job.

The overlay is rendered here as kustomize renders it for the features it uses (resources, namespace,
images, JSON patches with target selectors), and every rendered object is validated: the built-in
kinds against the Kubernetes 1.30 schemas (kubernetes-validate, strict), the operators' kinds against
schemas of the fields we use, written from the CloudNativePG and Prometheus Operator API references
(no installed package ships those CRDs: strict, so that a misspelt or misplaced field fails).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from sessionq import config

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
OVERLAY = DEPLOY / "overlays" / "production"
KUBERNETES_VERSION = "1.30.0"


def load_docs(path: Path) -> list[Any]:
    with path.open() as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


# -- a small kustomize: what the overlay uses ------------------------------------------------------


def _pointer(path: str) -> list[str | int]:
    parts: list[str | int] = []
    for raw in path.lstrip("/").split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        parts.append(int(token) if token.isdigit() else token)
    return parts


def apply_json_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    for op in ops:
        *parents, last = _pointer(op["path"])
        node: Any = doc
        for p in parents:
            node = node[p]
        if op["op"] == "replace":
            assert (last in node) if isinstance(node, dict) else (isinstance(last, int) and last < len(node)), op
            node[last] = copy.deepcopy(op["value"])
        elif op["op"] == "add":
            if isinstance(node, list):
                node.insert(len(node) if last == "-" else int(last), copy.deepcopy(op["value"]))
            else:
                node[last] = copy.deepcopy(op["value"])
        else:
            raise AssertionError(f"unsupported op {op['op']}")
    return doc


def _matches(doc: dict[str, Any], target: dict[str, Any]) -> bool:
    group, _, version = doc["apiVersion"].rpartition("/")
    if target.get("kind") and target["kind"] != doc["kind"]:
        return False
    if "group" in target and target["group"] != group:
        return False
    if "version" in target and target["version"] != version:
        return False
    if "name" in target and target["name"] != doc["metadata"]["name"]:
        return False
    for term in target.get("labelSelector", "").split(",") if target.get("labelSelector") else []:
        key, _, value = term.partition("=")
        if doc["metadata"].get("labels", {}).get(key) != value:
            return False
    return True


def build(directory: Path) -> list[dict[str, Any]]:
    """The objects `kustomize build directory` makes (resources, namespace, images, patches)."""
    (k,) = load_docs(directory / "kustomization.yaml")
    assert set(k) <= {"apiVersion", "kind", "namespace", "resources", "images", "patches"}, set(k)
    docs: list[dict[str, Any]] = []
    for resource in k.get("resources", []):
        path = (directory / resource).resolve()
        docs += build(path) if path.is_dir() else load_docs(path)
    for image in k.get("images", []):
        for doc in docs:
            template = doc.get("spec", {}).get("template", {}).get("spec", {})
            for c in template.get("containers", []) if isinstance(template, dict) else []:
                name, _, _tag = c.get("image", "").partition(":")
                if name == image["name"]:
                    c["image"] = f"{image.get('newName', name)}:{image['newTag']}"
    for patch in k.get("patches", []):
        ops = yaml.safe_load(patch["patch"]) if "patch" in patch else yaml.safe_load(
            (directory / patch["path"]).read_text())
        assert isinstance(ops, list), "only JSON 6902 patches are rendered here"
        targets = [i for i, d in enumerate(docs) if _matches(d, patch["target"])]
        assert targets, f"a patch matches nothing: {patch['target']}"
        for i in targets:
            docs[i] = apply_json_patch(docs[i], ops)
    if "namespace" in k:
        for doc in docs:
            if doc["kind"] != "Namespace":
                doc["metadata"]["namespace"] = k["namespace"]
    return docs


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    return build(OVERLAY)


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} objects"
    return found[0]


# -- the operators' kinds: schemas of the fields we use -----------------------------------------------

_OBJ: dict[str, Any] = {"type": "object"}
_STR: dict[str, Any] = {"type": "string"}
_INT: dict[str, Any] = {"type": "integer"}
_BOOL: dict[str, Any] = {"type": "boolean"}


def strict(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


_META = strict({"name": _STR, "namespace": _STR, "labels": {"type": "object", "additionalProperties": _STR},
                "annotations": {"type": "object", "additionalProperties": _STR}}, ("name",))
_SECRET_KEY = strict({"name": _STR, "key": _STR}, ("name", "key"))
_QUANTITY = {"type": ["string", "integer"]}
_RESOURCES = strict({"requests": {"type": "object", "additionalProperties": _QUANTITY},
                     "limits": {"type": "object", "additionalProperties": _QUANTITY}})

# CloudNativePG v1 (postgresql.cnpg.io/v1): Cluster and Pooler, the fields of its API reference we use
CLUSTER = strict({
    "apiVersion": {"const": "postgresql.cnpg.io/v1"}, "kind": {"const": "Cluster"}, "metadata": _META,
    "spec": strict({
        "instances": {"type": "integer", "minimum": 1},
        "imageName": _STR,
        "primaryUpdateStrategy": {"enum": ["unsupervised", "supervised"]},
        "postgresql": strict({
            "parameters": {"type": "object", "additionalProperties": _STR},
            "synchronous": strict({"method": {"enum": ["any", "first"]}, "number": {"type": "integer", "minimum": 1},
                                   "dataDurability": {"enum": ["required", "preferred"]}}, ("method", "number")),
        }),
        "bootstrap": strict({"initdb": strict({"database": _STR, "owner": _STR,
                                               "postInitApplicationSQL": {"type": "array", "items": _STR}})}),
        "storage": strict({"size": _STR, "storageClass": _STR}, ("size",)),
        "walStorage": strict({"size": _STR, "storageClass": _STR}, ("size",)),
        "resources": _RESOURCES,
        "affinity": strict({"enablePodAntiAffinity": _BOOL, "topologyKey": _STR,
                            "podAntiAffinityType": {"enum": ["preferred", "required"]}}),
        "monitoring": strict({"enablePodMonitor": _BOOL}),
        "backup": strict({
            "retentionPolicy": {"type": "string", "pattern": "^[1-9][0-9]*[dwm]$"},
            "barmanObjectStore": strict({
                "destinationPath": _STR, "endpointURL": _STR,
                "s3Credentials": strict({"accessKeyId": _SECRET_KEY, "secretAccessKey": _SECRET_KEY}),
                "wal": strict({"compression": {"enum": ["gzip", "bzip2", "snappy", "lz4", "xz", "zstd"]},
                               "maxParallel": _INT}),
                "data": strict({"compression": {"enum": ["gzip", "bzip2", "snappy"]}}),
            }, ("destinationPath",)),
        }),
    }, ("instances", "storage")),
}, ("apiVersion", "kind", "metadata", "spec"))

POOLER = strict({
    "apiVersion": {"const": "postgresql.cnpg.io/v1"}, "kind": {"const": "Pooler"}, "metadata": _META,
    "spec": strict({
        "cluster": strict({"name": _STR}, ("name",)),
        "instances": _INT,
        "type": {"enum": ["rw", "ro", "r"]},
        "pgbouncer": strict({"poolMode": {"enum": ["session", "transaction"]},
                             "parameters": {"type": "object", "additionalProperties": _STR}}),
        "monitoring": strict({"enablePodMonitor": _BOOL}),
        "template": {"type": "object"},  # a PodTemplateSpec: validated with the Kubernetes schemas below
    }, ("cluster", "pgbouncer")),
}, ("apiVersion", "kind", "metadata", "spec"))

# Prometheus Operator monitoring.coreos.com/v1: ServiceMonitor and PrometheusRule
_DURATION = {"type": "string", "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}
SERVICE_MONITOR = strict({
    "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "ServiceMonitor"}, "metadata": _META,
    "spec": strict({
        "selector": strict({
            "matchLabels": {"type": "object", "additionalProperties": _STR},
            "matchExpressions": {"type": "array", "items": strict(
                {"key": _STR, "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                 "values": {"type": "array", "items": _STR}}, ("key", "operator"))},
        }),
        "endpoints": {"type": "array", "minItems": 1, "items": strict(
            {"port": _STR, "path": _STR, "interval": _DURATION, "scrapeTimeout": _DURATION})},
    }, ("selector", "endpoints")),
}, ("apiVersion", "kind", "metadata", "spec"))

PROMETHEUS_RULE = strict({
    "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "PrometheusRule"}, "metadata": _META,
    "spec": strict({"groups": {"type": "array", "items": strict({
        "name": _STR, "interval": _DURATION,
        "rules": {"type": "array", "items": strict({
            "alert": _STR, "record": _STR, "expr": {"type": ["string", "integer"]}, "for": _DURATION,
            "labels": {"type": "object", "additionalProperties": _STR},
            "annotations": {"type": "object", "additionalProperties": _STR}}, ("expr",))},
    }, ("name", "rules"))}}, ("groups",)),
}, ("apiVersion", "kind", "metadata", "spec"))

OPERATOR_SCHEMAS = {"Cluster": CLUSTER, "Pooler": POOLER, "ServiceMonitor": SERVICE_MONITOR,
                    "PrometheusRule": PROMETHEUS_RULE}


# -- the tests -------------------------------------------------------------------------------------


def test_every_rendered_object_validates(rendered: list[dict[str, Any]]) -> None:
    import kubernetes_validate

    problems = []
    kinds = set()
    for doc in rendered:
        kinds.add(doc["kind"])
        where = f"{doc['kind']}/{doc['metadata']['name']}"
        schema = OPERATOR_SCHEMAS.get(doc["kind"])
        try:
            if schema is not None:
                jsonschema.validate(doc, schema)
                if doc["kind"] == "Pooler":  # its pod template is a Kubernetes PodTemplateSpec
                    kubernetes_validate.validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
                                                  "template": doc["spec"]["template"]}, KUBERNETES_VERSION, strict=True)
            else:
                kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except (jsonschema.ValidationError, kubernetes_validate.ValidationError) as e:
            problems.append(f"{where}: {e.message} at {'/'.join(map(str, e.path))}")
    assert not problems, "\n".join(problems)
    assert {"Namespace", "Cluster", "Pooler", "ServiceMonitor", "PrometheusRule", "Deployment", "Job",
            "ConfigMap", "Service"} <= kinds


def test_the_operator_schemas_refuse_a_misplaced_field() -> None:
    """The hand-written schemas are strict (a typo is an error, not an ignored field)."""
    (cluster,) = load_docs(DEPLOY / "kubernetes" / "postgres" / "cluster.yaml")
    bad = copy.deepcopy(cluster)
    bad["spec"]["postgresql"]["synchronous"]["numbr"] = 1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, CLUSTER)
    (pooler,) = load_docs(DEPLOY / "kubernetes" / "postgres" / "pooler.yaml")
    bad = copy.deepcopy(pooler)
    bad["spec"]["pgbouncer"]["poolMode"] = "statement"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, POOLER)


def test_postgres_is_three_instances_with_synchronous_replication_and_backup_placeholders(
        rendered: list[dict[str, Any]]) -> None:
    cluster = one(rendered, "Cluster")
    spec = cluster["spec"]
    assert spec["instances"] == 3
    sync = spec["postgresql"]["synchronous"]
    assert sync["number"] >= 1 and sync.get("dataDurability", "required") == "required"
    assert spec["bootstrap"]["initdb"]["database"] == "sessionq"
    store = spec["backup"]["barmanObjectStore"]
    assert "CHANGE-ME" in store["destinationPath"]  # a placeholder, said so
    assert int(spec["postgresql"]["parameters"]["max_connections"]) >= 200


@pytest.mark.clause("HA-1")
def test_api_workers_and_migration_use_the_pooler_and_the_direct_url(rendered: list[dict[str, Any]]) -> None:
    cluster = one(rendered, "Cluster")["metadata"]["name"]
    pooler = one(rendered, "Pooler")
    assert pooler["spec"]["cluster"]["name"] == cluster
    assert pooler["spec"]["type"] == "rw" and pooler["spec"]["pgbouncer"]["poolMode"] == "transaction"
    env_names = {k.env for k in config.KEYS}
    pods = [d for d in rendered if d["kind"] in ("Deployment", "Job")]
    assert {d["metadata"]["name"] for d in pods} == {"sessionq-api", "sessionq-worker", "sessionq-migrate"}
    for d in pods:
        (c,) = d["spec"]["template"]["spec"]["containers"]
        env = c["env"]
        names = [e["name"] for e in env]
        assert len(names) == len(set(names)), f"{d['metadata']['name']}: duplicate env {names}"
        values = {e["name"]: e.get("value") for e in env}
        url, direct = values["SESSIONQ_DATABASE__URL"], values["SESSIONQ_DATABASE__DIRECT_URL"]
        assert url is not None and f"@{pooler['metadata']['name']}:5432/sessionq" in url, url
        assert direct is not None and f"@{cluster}-rw:5432/sessionq" in direct, direct
        for e in env:  # $(VAR) references name variables defined earlier (Kubernetes expands only those)
            for ref in re.findall(r"\$\(([A-Z0-9_]+)\)", e.get("value", "")):
                assert ref in names[: names.index(e["name"])], f"{d['metadata']['name']}: {e['name']} uses {ref}"
            key_ref = e.get("valueFrom", {}).get("secretKeyRef")
            if key_ref and key_ref["name"] == f"{cluster}-app":
                assert key_ref["key"] in ("username", "password")  # keys CloudNativePG's app Secret has
            elif e["name"].startswith("SESSIONQ_") and not e["name"].startswith("SESSIONQ_DB_"):
                assert e["name"] in env_names, e["name"]
        assert c["image"] == "registry.example.com/sessionq:0.1.0"  # the overlay sets the image
        assert d["metadata"]["namespace"] == "sessionq"
    assert config.load(None, env={"SESSIONQ_DATABASE__URL": "postgresql://u:p@pooler/db",
                                  "SESSIONQ_DATABASE__DIRECT_URL": "postgresql://u:p@rw/db"}).direct_url == \
        "postgresql://u:p@rw/db"


def test_first_install_steps_select_what_they_need(rendered: list[dict[str, Any]]) -> None:
    """The README's three steps apply the overlay by component label: the namespace and the database,
    then the configuration and the migration Job, then everything."""
    def component(d: dict[str, Any]) -> str:
        return str(d["metadata"]["labels"]["app.kubernetes.io/component"])

    step1 = {d["kind"] for d in rendered if component(d) in ("namespace", "database")}
    step2 = {(d["kind"], d["metadata"]["name"]) for d in rendered if component(d) in ("config", "migrate")}
    assert step1 == {"Namespace", "Cluster", "Pooler"}
    assert step2 == {("ConfigMap", "sessionq-config"), ("Job", "sessionq-migrate")}
    readme = (DEPLOY / "README.md").read_text()
    assert "kubectl apply -k deploy/overlays/production -l 'app.kubernetes.io/component in (namespace,database)'" in readme
    assert "kubectl apply -k deploy/overlays/production -l 'app.kubernetes.io/component in (config,migrate)'" in readme


def test_service_monitor_scrapes_every_process(rendered: list[dict[str, Any]]) -> None:
    monitor = one(rendered, "ServiceMonitor")
    services = [d for d in rendered if d["kind"] == "Service"]

    def selected(svc: dict[str, Any]) -> bool:
        labels = svc["metadata"]["labels"]
        sel = monitor["spec"]["selector"]
        ok = all(labels.get(k) == v for k, v in sel.get("matchLabels", {}).items())
        for expr in sel.get("matchExpressions", []):
            ok = ok and labels.get(expr["key"]) in expr["values"]
        return ok

    ports = {p["name"] for s in services if selected(s) for p in s["spec"]["ports"]}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports
    chosen = {s["metadata"]["name"] for s in services if selected(s) and
              any(p["name"] == "metrics" for p in s["spec"]["ports"])}
    assert chosen == {"sessionq-api", "sessionq-worker-metrics"}


def test_prometheus_rule_is_the_rule_file() -> None:
    (rule,) = load_docs(DEPLOY / "kubernetes" / "monitoring" / "prometheusrule.yaml")
    (alerts,) = load_docs(DEPLOY / "prometheus" / "alerts.yaml")
    assert rule["spec"]["groups"] == alerts["groups"], "run scripts/gen_prometheusrule.py"
