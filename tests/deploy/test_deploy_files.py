"""Offline checks of deploy/: the image recipe, the Kubernetes manifests, the alert rules and the
Grafana dashboard.

- Every YAML file parses; the Kubernetes manifests validate against the Kubernetes 1.30 OpenAPI
  schemas (kubernetes-validate, strict: unknown fields are errors), and cross-references
  (selectors, ports, ConfigMap, Secret keys) are consistent.
- The ConfigMap's config.yaml loads with `sessionq.config.load` and lists every key of
  `sessionq.config.KEYS` with its default, except the documented Kubernetes deviations.
- The worker's termination grace period exceeds workers.shutdownTimeout; the API's probes are
  native gRPC probes on port 8083; the worker's readiness probe is its metrics server's /ready.
- Every metric that alerts.yaml and the dashboard query is exported by the code (or is listed in
  PENDING_METRICS below), counters and histograms are read through rate()/increase(), and label
  matchers use labels the metric has.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
import tomllib
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from sessionq import config

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
ALERTS = DEPLOY / "prometheus" / "alerts.yaml"
DASHBOARD = DEPLOY / "grafana" / "sessionq-dashboard.json"
DOCKERFILE = DEPLOY / "Dockerfile"

KUBERNETES_VERSION = "1.30.0"
GRPC_PORT = 8083
METRICS_PORT = 9464
CONFIG_MOUNT = "/etc/sessionq"

# Keys whose ConfigMap value deliberately differs from the default (a cluster needs it).
CONFIGMAP_DEVIATIONS = {
    "server.address": "0.0.0.0:8083",
    "metrics.enabled": True,
    "metrics.address": "0.0.0.0:9464",
    "runtime.simulator.taskStoreAddress": "sessionq-api:8083",
    "server.processes": 1,  # 0 (one per CPU) would count the node's CPUs, not the pod's limit
}

# Metrics the rules and the dashboard use that importing the code does not show: metrics other
# engineers are still adding (remove an entry once the metric is exported; the test warns about
# entries that are exported already) and metrics a custom collector yields only in some states.
# Value: the metric's label names (None: unknown, not checked).
PENDING_METRICS: dict[str, set[str] | None] = {
    # permanent: RevisionGcMetrics yields the gauge only on the active GC replica after a
    # successful discovery (absent, not zero, otherwise), so it is missing at import time
    "kagent_runtime_revision_gc_pending": set(),
}

# Label names of families yielded by custom collectors, which cannot be read from the collector.
CUSTOM_COLLECTOR_LABELS: dict[str, set[str]] = {
    "kagent_runtime_revision_gc_duration_seconds": {"kagent_gc_stage", "error_type"},
}


# -- loading ---------------------------------------------------------------------------------------


def yaml_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml"))


def load_docs(path: Path) -> list[Any]:
    with path.open() as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def manifests() -> list[tuple[Path, dict[str, Any]]]:
    return [(p, d) for p in sorted(K8S.glob("*.yaml")) for d in load_docs(p)]


def resources(kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for p, d in manifests() if d.get("kind") == kind and p.name != "secret.example.yaml"}


def example_secret() -> dict[str, Any]:
    (doc,) = load_docs(K8S / "secret.example.yaml")
    return doc


def configmap() -> dict[str, Any]:
    (cm,) = resources("ConfigMap").values()
    return cm


def pod_specs() -> Iterator[tuple[str, dict[str, Any]]]:
    for kind in ("Deployment", "Job"):
        for name, d in resources(kind).items():
            yield f"{kind}/{name}", d["spec"]["template"]["spec"]


def container(deployment: str) -> dict[str, Any]:
    (c,) = resources("Deployment")[deployment]["spec"]["template"]["spec"]["containers"]
    return c


def flatten(prefix: str, data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in data.items():
        path = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and path not in {key.path for key in config.KEYS}:
            out.update(flatten(path, v))
        else:
            out[path] = v
    return out


def literal_env(c: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}


def secret_env(c: dict[str, Any]) -> dict[str, str]:
    """The container's environment with the example Secret's values filled in."""
    secret = example_secret()
    env = literal_env(c)
    for e in c.get("env", []):
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        if ref:
            env[e["name"]] = secret["stringData"][ref["key"]]
    return env


def load_configmap_settings(tmp_path: Path, env: dict[str, str] | None = None) -> config.Settings:
    path = tmp_path / "config.yaml"
    path.write_text(configmap()["data"]["config.yaml"])
    return config.load(path, env=env or {})


# -- YAML and Kubernetes schemas ---------------------------------------------------------------------


def test_every_yaml_file_parses() -> None:
    files = yaml_files()
    assert {p.relative_to(DEPLOY).as_posix() for p in files} >= {
        "kubernetes/kustomization.yaml", "kubernetes/configmap.yaml", "kubernetes/secret.example.yaml",
        "kubernetes/migrate-job.yaml", "kubernetes/api-deployment.yaml", "kubernetes/worker-deployment.yaml",
        "kubernetes/service.yaml", "kubernetes/pdb.yaml", "prometheus/alerts.yaml",
    }
    for p in files:
        docs = load_docs(p)
        assert docs, f"{p} holds no document"
        assert all(isinstance(d, dict) for d in docs), f"{p}: every document must be a mapping"


def test_manifests_validate_against_kubernetes_schemas() -> None:
    import kubernetes_validate  # the test extra installs it; the schemas ship inside the package

    checked, problems = 0, []
    for path, doc in manifests():
        if doc.get("kind") == "Kustomization":  # a kustomize file, not an API object
            continue
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            problems.append(f"{path.name}: {doc.get('kind')}/{doc['metadata'].get('name')}: {e.message}"
                            f" at {'/'.join(map(str, e.path))}")
        checked += 1
    assert not problems, "\n".join(problems)
    assert checked >= 9


def test_manifests_are_namespace_agnostic_and_labelled() -> None:
    for path, doc in manifests():
        if doc["kind"] == "Kustomization":
            assert "namespace" not in doc, "set the namespace in an overlay"
            continue
        meta = doc["metadata"]
        assert "namespace" not in meta, f"{path.name}: {meta['name']} pins a namespace"
        assert meta["labels"]["app.kubernetes.io/name"] == "sessionq", f"{path.name}: {meta['name']}"


def test_kustomization_lists_every_manifest_but_the_example_secret() -> None:
    (k,) = load_docs(K8S / "kustomization.yaml")
    assert k["apiVersion"] == "kustomize.config.k8s.io/v1beta1" and k["kind"] == "Kustomization"
    listed = k["resources"]
    assert len(listed) == len(set(listed))
    expected = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml", "secret.example.yaml"}
    assert set(listed) == expected
    # applying the base must never overwrite the real Secret with placeholders
    assert "secret.example.yaml" not in listed
    images = {i["name"] for i in k.get("images", [])}
    for where, spec in pod_specs():
        for c in spec["containers"]:
            assert c["image"].split(":")[0] in images, f"{where}: image {c['image']} is not in the kustomization's images"


# -- cross-references --------------------------------------------------------------------------------


def test_selectors_match_their_pods() -> None:
    deployments = resources("Deployment")
    pod_labels = [d["spec"]["template"]["metadata"]["labels"] for d in deployments.values()]
    for name, d in deployments.items():
        selector = d["spec"]["selector"]["matchLabels"]
        labels = d["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), f"Deployment/{name}: selector does not match its pods"
        matched = [lab for lab in pod_labels if selector.items() <= lab.items()]
        assert len(matched) == 1, f"Deployment/{name}: selector matches another Deployment's pods"
    for kind in ("Service", "PodDisruptionBudget"):
        for name, r in resources(kind).items():
            sel = r["spec"]["selector"]
            sel = sel.get("matchLabels", sel) if kind == "PodDisruptionBudget" else sel
            assert any(sel.items() <= lab.items() for lab in pod_labels), f"{kind}/{name} selects no pods"
    pdbs = resources("PodDisruptionBudget")
    for name, d in deployments.items():
        labels = d["spec"]["template"]["metadata"]["labels"]
        assert any(p["spec"]["selector"]["matchLabels"].items() <= labels.items() for p in pdbs.values()), (
            f"Deployment/{name} has no PodDisruptionBudget")


def test_service_ports_reach_container_ports() -> None:
    deployments = resources("Deployment")
    api = resources("Service")["sessionq-api"]
    assert {(p["name"], p["port"]) for p in api["spec"]["ports"]} == {
        ("grpc", GRPC_PORT), ("metrics", METRICS_PORT)}
    for name, svc in resources("Service").items():
        pods = [d for d in deployments.values()
                if svc["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()]
        for p in svc["spec"]["ports"]:
            for d in pods:
                ports = {cp["name"]: cp["containerPort"] for c in d["spec"]["template"]["spec"]["containers"]
                         for cp in c.get("ports", [])}
                target = p["targetPort"]
                assert (target in ports) if isinstance(target, str) else (target in ports.values()), (
                    f"Service/{name} port {p['name']} targets {target}, not a port of {d['metadata']['name']}")
                if isinstance(target, str):
                    assert ports[target] == p["port"]


def test_pods_use_the_configmap_and_the_secret() -> None:
    cm_name = configmap()["metadata"]["name"]
    secret = example_secret()
    env_names = {k.env for k in config.KEYS}
    for where, spec in pod_specs():
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for c in spec["containers"]:
            args = c["args"]
            assert args[0] in {"serve", "worker", "migrate"}, where
            assert args[args.index("--config") + 1] == f"{CONFIG_MOUNT}/config.yaml", where
            (mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == CONFIG_MOUNT]
            assert volumes[mount["name"]]["configMap"]["name"] == cm_name, where
            names = [e["name"] for e in c.get("env", [])]
            assert "SESSIONQ_DATABASE__URL" in names, f"{where}: no database URL"
            for e in c.get("env", []):
                assert e["name"] in env_names, f"{where}: {e['name']} is not a sessionq setting (Key.env)"
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["name"] == secret["metadata"]["name"], where
                    assert ref["key"] in secret["stringData"], f"{where}: the Secret has no key {ref['key']}"
            # the Secret's values (with the container's env) still make a valid configuration
            config.load(None, env=secret_env(c))
    for key in secret["stringData"]:
        assert key in env_names, f"secret.example.yaml: {key} is not a sessionq setting"


def test_pods_are_hardened_and_sized() -> None:
    runtime_user = docker_user()
    for where, spec in pod_specs():
        psc = spec["securityContext"]
        assert psc["runAsNonRoot"] is True and psc["runAsUser"] == runtime_user, where
        assert psc["seccompProfile"]["type"] == "RuntimeDefault", where
        assert spec.get("automountServiceAccountToken") is False, where
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True, where
            assert sc["capabilities"]["drop"] == ["ALL"], where
            assert {"cpu", "memory"} <= c["resources"]["requests"].keys(), where
            assert "memory" in c["resources"]["limits"], where
            # a read-only root: Python and libraries get a writable /tmp
            assert any(m["mountPath"] == "/tmp" for m in c["volumeMounts"]), where


# -- configuration -----------------------------------------------------------------------------------


def test_configmap_documents_every_key_with_its_default(tmp_path: Path) -> None:
    raw = yaml.safe_load(configmap()["data"]["config.yaml"])
    listed = flatten("", raw)
    paths = [k.path for k in config.KEYS]
    assert sorted(listed) == sorted(paths), "the ConfigMap must list exactly the keys of sessionq.config.KEYS"
    settings = load_configmap_settings(tmp_path)
    defaults = config.defaults()
    for path in paths:
        if path in CONFIGMAP_DEVIATIONS:
            assert settings[path] == CONFIGMAP_DEVIATIONS[path], path
            assert settings[path] != defaults[path], f"{path}: no longer differs from the default"
        else:
            assert settings[path] == defaults[path], f"{path}: the ConfigMap says {settings[path]!r}, the default is {defaults[path]!r}"
    # durations are written as the documented protobuf duration strings
    durations = {k.path for k in config.KEYS if k.parse in (config._duration, config._positive_duration)}
    for path, value in listed.items():
        if path in durations:
            assert isinstance(value, str) and value.endswith("s"), f"{path}: write durations like \"60s\""


def test_containers_load_their_configuration(tmp_path: Path) -> None:
    for name in ("sessionq-api", "sessionq-worker"):
        settings = load_configmap_settings(tmp_path, secret_env(container(name)))
        assert settings.database_url.startswith("postgresql://")
        assert settings["server.address"].rpartition(":")[2] == str(GRPC_PORT)
        assert settings["metrics.enabled"] is True
        assert settings["metrics.address"] == f"0.0.0.0:{METRICS_PORT}"
    api = load_configmap_settings(tmp_path, secret_env(container("sessionq-api")))
    assert api["auth.tokens"], "the API gets its bearer tokens from the Secret"
    assert api["inventory.cursorSecret"], "every API replica needs the same inventory.cursorSecret"
    assert api["auth.anonymousUser"] == ""
    worker = load_configmap_settings(tmp_path, secret_env(container("sessionq-worker")))
    # simulated Actors run inside the workers and report to the API through its Service
    host, _, port = worker["runtime.simulator.taskStoreAddress"].rpartition(":")
    assert host == "sessionq-api" and int(port) == GRPC_PORT
    assert host in resources("Service")


def test_worker_grace_period_exceeds_the_drain_timeout(tmp_path: Path) -> None:
    worker = resources("Deployment")["sessionq-worker"]["spec"]["template"]["spec"]
    settings = load_configmap_settings(tmp_path, secret_env(container("sessionq-worker")))
    timeout = settings["workers.shutdownTimeout"]
    assert worker["terminationGracePeriodSeconds"] > timeout
    # room for stopping the quiescence workers and closing the pools after the drain
    assert worker["terminationGracePeriodSeconds"] >= timeout + 15
    assert container("sessionq-worker")["args"][0] == "worker"


def test_api_probes_are_native_grpc_on_8083() -> None:
    spec = resources("Deployment")["sessionq-api"]["spec"]["template"]["spec"]
    c = container("sessionq-api")
    assert c["args"][0] == "serve"
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert c[probe]["grpc"]["port"] == GRPC_PORT, probe
        # readiness also asks whether the runtime answers (issue 17); liveness never depends on it
        want = "sessionq.runtime" if probe == "readinessProbe" else ""
        assert c[probe]["grpc"].get("service", "") == want, f"{probe}: health service {want!r}"
    assert {p["containerPort"] for p in c["ports"]} == {GRPC_PORT, METRICS_PORT}
    pre_stop = c["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    # preStop + the gRPC stop grace (5s in ApiServer.stop) fit in the grace period
    assert spec["terminationGracePeriodSeconds"] > int(pre_stop[1]) + 5


def test_worker_readiness_probe_asks_the_metrics_server(tmp_path: Path) -> None:
    """The worker's readiness is its metrics server's /ready (the database and the runtime answer);
    it has no liveness probe (it exits on its own when its job pool stops)."""
    worker = container("sessionq-worker")
    probe = worker["readinessProbe"]["httpGet"]
    assert probe["path"] == "/ready"
    ports = {p["name"]: p["containerPort"] for p in worker["ports"]}
    assert ports.get(probe["port"], probe["port"]) == METRICS_PORT
    assert "livenessProbe" not in worker
    settings = load_configmap_settings(tmp_path, secret_env(worker))
    assert settings["metrics.enabled"] is True, "/ready is served by the metrics server"
    assert settings["metrics.address"].rpartition(":")[2] == str(METRICS_PORT)


def test_migration_job_runs_migrate() -> None:
    (job,) = resources("Job").values()
    (c,) = job["spec"]["template"]["spec"]["containers"]
    assert c["args"][0] == "migrate"
    assert job["spec"]["template"]["spec"]["restartPolicy"] in ("Never", "OnFailure")


# -- Dockerfile --------------------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def docker_user() -> int:
    users = [rest for op, rest in dockerfile_instructions() if op == "USER"]
    return int(users[-1].split(":")[0])


def test_dockerfile() -> None:
    ins = dockerfile_instructions()
    args = {rest.split("=")[0]: rest.split("=", 1)[1] for op, rest in ins if op == "ARG" and "=" in rest}
    bases = [rest.split()[0].replace("${PYTHON_IMAGE}", args.get("PYTHON_IMAGE", "")) for op, rest in ins if op == "FROM"]
    assert bases and all(b == "python:3.11-slim" for b in bases)
    entrypoints = [json.loads(rest) for op, rest in ins if op == "ENTRYPOINT"]
    assert entrypoints[-1] == ["sessionq"], "exec-form ENTRYPOINT [\"sessionq\"]"
    assert docker_user() != 0
    assert any(op == "RUN" and re.search(r"pip install \.(\s|$)", rest) for op, rest in ins)
    # every source directory the package is built from is copied into the build stage
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    needed = {Path(d).parts[0] for d in pyproject["tool"]["setuptools"]["package-dir"].values()}
    needed |= {"pyproject.toml", pyproject["project"]["readme"]}
    copied = set()
    for op, rest in ins:
        if op == "COPY" and not rest.startswith("--from"):
            copied |= set(rest.split()[:-1])
    assert needed <= copied, f"the Dockerfile does not copy {sorted(needed - copied)}"
    for src in copied:
        assert (ROOT / src).exists(), f"COPY {src}: no such path in the repository"
    exposed = {int(p) for op, rest in ins if op == "EXPOSE" for p in rest.split()}
    assert exposed == {GRPC_PORT, METRICS_PORT}


def test_pip_install_packages_every_module() -> None:
    """The image installs with `pip install .` (not editable): a package or data file that
    pyproject.toml does not list would be missing from the image although the tests pass."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    package_dir: dict[str, str] = setuptools["package-dir"]
    listed = set(setuptools["packages"])
    data = setuptools.get("package-data", {})

    def directory(package: str) -> Path:
        for prefix in sorted(package_dir, key=len, reverse=True):
            if package == prefix or package.startswith(prefix + "."):
                rest = package[len(prefix):].lstrip(".")
                return ROOT / package_dir[prefix] / Path(*rest.split(".")) if rest else ROOT / package_dir[prefix]
        raise AssertionError(f"{package} is outside package-dir")

    found: dict[str, Path] = {}
    for top in package_dir:
        base = ROOT / package_dir[top]
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base)
            if "__pycache__" in rel.parts:
                continue
            found[".".join((top, *rel.parts))] = init.parent
    # a package-dir entry that is itself a sub-package of another (sessionq.jobs -> jobs/)
    assert set(found) <= listed, f"add to [tool.setuptools] packages: {sorted(set(found) - listed)}"
    for package in listed:
        d = directory(package)
        assert (d / "__init__.py").exists(), f"{package}: no {d}/__init__.py"
        for f in d.iterdir():
            if f.is_file() and f.suffix not in (".py", ".pyc", ".pyi"):  # stubs are for type checkers only
                patterns = data.get(package, [])
                assert any(f.match(pat) for pat in patterns), (
                    f"{f.relative_to(ROOT)} is not in [tool.setuptools.package-data] {package!r}: not in the image")


# -- metrics used by the alerts and the dashboard ------------------------------------------------------


def exported_metrics() -> dict[str, set[str] | None]:
    """Sample names the sessionq code exports, with their label names (None: not known)."""
    import prometheus_client

    import sessionq

    importlib.import_module("sessionq.metrics")
    # metrics may be defined next to the code that records them: import every module (but the
    # generated protobuf code and the alembic scripts, which run on import)
    for mod in pkgutil.walk_packages(sessionq.__path__, "sessionq."):
        if not mod.name.startswith(("sessionq._pb", "sessionq.db.migrations")):
            importlib.import_module(mod.name)
    registry = prometheus_client.REGISTRY
    labels_by_name: dict[str, set[str]] = {}
    for collector in list(getattr(registry, "_collector_to_names", {})):
        name, labelnames = getattr(collector, "_name", None), getattr(collector, "_labelnames", None)
        if name is not None and labelnames is not None:
            labels_by_name[name] = set(labelnames)
    suffixes = {"counter": ["_total", "_created"], "histogram": ["_bucket", "_count", "_sum", "_created"],
                "summary": ["", "_count", "_sum", "_created"], "gaugehistogram": ["_bucket", "_gcount", "_gsum"],
                "info": ["_info"], "gauge": [""], "stateset": [""], "enum": [""], "unknown": [""]}
    out: dict[str, set[str] | None] = {}
    for family in registry.collect():
        base = labels_by_name.get(family.name, CUSTOM_COLLECTOR_LABELS.get(family.name))
        for suffix in suffixes.get(family.type, [""]):
            labels = None if base is None else set(base) | ({"le"} if suffix == "_bucket" else set())
            out[family.name + suffix] = labels
        for sample in family.samples:
            out.setdefault(sample.name, set(sample.labels))
    return out


_NON_METRIC = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
               "offset", "inf", "nan"}
_TOKEN = re.compile(r"(?P<num>\d[\w.]*)|(?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)|(?P<brace>\{[^{}]*\})|(?P<open>\()"
                    r"|(?P<close>\))|(?P<other>\S)")
_RESET_AWARE = {"rate", "increase", "irate"}
_COUNTER_SUFFIXES = ("_total", "_count", "_sum", "_bucket")


def promql_selectors(expr: str) -> list[tuple[str, set[str], str | None]]:
    """(metric name, label names in its matchers, innermost enclosing function) of every vector
    selector of a PromQL expression. Enough PromQL for rule files and dashboards, not a parser."""
    s = re.sub(r"\$\{[^}]*\}|\$\w+", "", expr)  # Grafana variables ($__rate_interval, ${x}, $method)
    s = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', s)
    s = re.sub(r"\[[^\]]*\]", "", s)  # ranges and subqueries
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    assert s.count("(") == s.count(")") and s.count("{") == s.count("}"), f"unbalanced: {expr}"
    tokens = [(m.lastgroup, m.group()) for m in _TOKEN.finditer(s)]
    out: list[tuple[str, set[str], str | None]] = []
    stack: list[str | None] = []
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        nxt = tokens[i + 1] if i + 1 < len(tokens) else (None, "")
        if kind == "ident" and nxt[0] == "open":
            stack.append(text)
            i += 2
            continue
        if kind == "open":
            stack.append(None)
        elif kind == "close":
            stack.pop()
        elif kind == "brace":
            raise AssertionError(f"selector without a metric name in {expr!r}: name the metric")
        elif kind == "ident" and text not in _NON_METRIC:
            labels: set[str] = set()
            if nxt[0] == "brace":
                labels = set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", nxt[1]))
                i += 1
            enclosing = next((f for f in reversed(stack) if f is not None), None)
            out.append((text, labels, enclosing))
        i += 1
    return out


def alert_rules() -> list[dict[str, Any]]:
    (doc,) = load_docs(ALERTS)
    return [r for g in doc["groups"] for r in g["rules"]]


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def dashboard_panels() -> list[dict[str, Any]]:
    panels = []
    for p in dashboard()["panels"]:
        panels.append(p)
        panels.extend(p.get("panels", []))
    return panels


def dashboard_exprs() -> list[str]:
    return [t["expr"] for p in dashboard_panels() for t in p.get("targets", [])]


def dashboard_variable_exprs() -> list[str]:
    """The label_values(metric, label) variable queries, as selectors metric{label=""}."""
    exprs = []
    for var in dashboard()["templating"]["list"]:
        if var["type"] == "query":
            q = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            m = re.fullmatch(r"label_values\(\s*([A-Za-z_:][\w:]*)\s*,\s*(\w+)\s*\)", q)
            assert m, f"dashboard variable {var['name']}: unsupported query {q!r}"
            exprs.append(f'{m.group(1)}{{{m.group(2)}=""}}')
    return exprs


def check_metrics(where: str, exprs: list[str], *, values: bool = True) -> set[str]:
    """values: the expressions compute values (counters must go through rate/increase); False for
    label lookups such as Grafana's label_values()."""
    exported = exported_metrics()
    known = {**PENDING_METRICS, **exported}
    used: set[str] = set()
    problems = []
    for expr in exprs:
        selectors = promql_selectors(expr)
        assert selectors, f"{where}: no metric in {expr!r}"
        for name, labels, enclosing in selectors:
            used.add(name)
            if name not in known:
                problems.append(f"{name} is neither exported by sessionq nor in PENDING_METRICS ({expr!r})")
                continue
            if known[name] is not None and not labels <= known[name]:  # type: ignore[operator]
                problems.append(f"{name} has no label(s) {sorted(labels - known[name])} ({expr!r})")  # type: ignore[operator]
            if values and name.endswith(_COUNTER_SUFFIXES) and enclosing not in _RESET_AWARE:
                problems.append(f"{name} must be read through rate()/increase() (reset-aware), not {enclosing}()")
        if "histogram_quantile" in expr:
            assert any(n.endswith("_bucket") for n, _, _ in selectors), f"{where}: {expr!r}"
    assert not problems, f"{where}:\n" + "\n".join(problems)
    landed = sorted(n for n in PENDING_METRICS if n in exported)
    if landed:
        warnings.warn(f"exported now, remove from PENDING_METRICS: {landed}", stacklevel=2)
    return used


def test_promql_selector_extraction() -> None:
    sel = promql_selectors(
        'histogram_quantile(0.99, sum by (le, method) (rate(a_bucket{method=~"Get.*", code!="OK"}[$__rate_interval])))'
        ' > 1e3 and deriv(max by (queue) (b)[15m:1m]) >= 0 unless c offset 15m'
    )
    assert sel == [("a_bucket", {"method", "code"}, "rate"), ("b", set(), "max"), ("c", set(), None)]


def test_alert_rules_use_exported_metrics() -> None:
    rules = alert_rules()
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names)), "alert names must be unique"
    for r in rules:
        assert set(r) <= {"alert", "expr", "for", "labels", "annotations", "keep_firing_for"}, r["alert"]
        assert r["labels"]["severity"] in {"critical", "warning", "info"}, r["alert"]
        assert r["annotations"]["summary"], r["alert"]
        if "for" in r:
            assert re.fullmatch(r"(\d+[smhd])+", r["for"]), r["alert"]
    used = check_metrics("alerts.yaml", [r["expr"] for r in rules])
    # every family the brief asks for has a rule
    for name in ("sessionq_grpc_requests_total", "sessionq_grpc_request_duration_seconds_bucket",
                 "sessionq_operations_total", "sessionq_quiescence_latency_seconds_bucket", "sessionq_queue_depth",
                 "sessionq_queue_oldest_job_age_seconds", "kagent_runtime_revision_gc_pending",
                 "kagent_runtime_revision_gc_duration_seconds_count", "kagent_session_expired_total"):
        assert name in used, f"no alert on {name}"
    # absence of the GC pending gauge is meaningful: never fill it with zero
    for r in rules:
        assert not re.search(r"or\s+(on\s*\(\)\s*)?vector\(0\)", r["expr"]), r["alert"]


def test_dashboard_queries_use_exported_metrics() -> None:
    d = dashboard()
    assert 36 <= d["schemaVersion"] <= 41
    assert d["uid"] and d["title"]
    variables = {v["name"] for v in d["templating"]["list"]}
    ids = [p["id"] for p in dashboard_panels()]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    cells: set[tuple[int, int]] = set()
    for p in dashboard_panels():
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"panel {p['title']!r} overlaps another"
        cells |= mine
        if p["type"] == "row":
            continue
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["expr"].strip() and t["refId"], p["title"]
            for var in re.findall(r"\$(\w+)", t["expr"]):
                assert var.startswith("__") or var in variables, f"{p['title']}: unknown variable ${var}"
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
    used = check_metrics("sessionq-dashboard.json", dashboard_exprs())
    check_metrics("sessionq-dashboard.json variables", dashboard_variable_exprs(), values=False)
    # the dashboard shows everything the alerts watch
    alerted = {n for r in alert_rules() for n, _, _ in promql_selectors(r["expr"])}
    assert alerted <= used, f"metrics alerted on but not on the dashboard: {sorted(alerted - used)}"


def test_the_api_is_reachable_on_one_port_and_metrics_only() -> None:
    """The NetworkPolicy of the API pods opens the one API port and the metrics port, nothing else."""
    policy = resources("NetworkPolicy")["sessionq-api"]
    api = resources("Deployment")["sessionq-api"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= api["spec"]["template"]["metadata"]["labels"].items()
    assert [sorted(p["port"] for p in rule["ports"]) for rule in policy["spec"]["ingress"]] == [[GRPC_PORT, METRICS_PORT]]
