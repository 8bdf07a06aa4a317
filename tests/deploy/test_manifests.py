"""The Kubernetes manifests as ``kubectl kustomize`` renders them, and the compose file.

Every rendered object validates against the Kubernetes 1.30 and 1.32 OpenAPI schemas
(kubernetes-validate, strict: an unknown field is an error); the tests below read the rendered
objects and check what an operator relies on: preStop before SIGTERM, an init container that
waits for the schema, no secret in any ConfigMap (and a hashed ConfigMap name, so a change rolls
the pods), selectors with the instance label, Pod Security Admission labels that the pods meet,
a ``sizeLimit`` on every emptyDir, a NetworkPolicy that names who may connect, a base that
``kubectl delete -k`` can remove without taking the namespace or the hand-made Secrets, and a
ServiceMonitor and PrometheusRule whose expressions name series the service exports. Every
``EVALSTOP_*`` variable set anywhere is a ``ServiceSettings`` field whose value it accepts.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import SecretStr, ValidationError

from evalstop.service.metrics import ServiceMetrics
from evalstop.service.settings import ServiceSettings

kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="pip install -e '.[dev]'")

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "kubernetes"
COMPOSE = ROOT / "deploy" / "compose" / "compose.yaml"
K8S_VERSIONS = ["1.30.0", "1.32.0"]
PREFIX = str(ServiceSettings.model_config.get("env_prefix", ""))
INSTANCE = {"app.kubernetes.io/name": "evalstop", "app.kubernetes.io/instance": "evalstop"}
#: Settings that may carry a secret: never in a ConfigMap (their ``_FILE`` forms are paths)
SECRET_SETTINGS = {"database_url", "adapter_settings"} | {
    name for name, field in ServiceSettings.model_fields.items()
    if field.annotation in (SecretStr, SecretStr | None)}
#: Series the alerts may name that the service does not export: Prometheus's own per-target
#: `up`, and kube-state-metrics' deployment replicas (kube-prometheus-stack ships it).
EXTERNAL_SERIES = {"up": {"job", "pod"}, "kube_deployment_status_replicas_available": {"deployment"},
                   "kube_deployment_spec_replicas": {"deployment"}}
#: PodSpec volume types the "restricted" Pod Security Standard allows (besides PVCs, ephemeral, ...)
RESTRICTED_VOLUMES = {"configMap", "secret", "emptyDir", "projected", "downwardAPI"}


KUBECTL = shutil.which("kubectl") or shutil.which("kubectl", path=str(Path(sys.executable).parent))
if KUBECTL is None:
    WHY = "kubectl renders the manifests (kubectl kustomize); scripts/setup.d/80-container.sh installs it"
    if os.environ.get("CI") == "true":
        raise RuntimeError(WHY)
    pytest.skip(WHY, allow_module_level=True)


def render(folder: Path) -> list[dict[str, Any]]:
    out = subprocess.run([str(KUBECTL), "kustomize", str(folder)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


BASE = render(K8S)
MONITORING = render(K8S / "monitoring")
BY_HAND = [doc for name in ("namespace.yaml", "tenant-rolebinding.yaml")
           for doc in yaml.safe_load_all((K8S / name).read_text()) if doc]


def one(kind: str, objects: list[dict[str, Any]] = BASE, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, [o["metadata"]["name"] for o in found]
    return found[0]


def pod_specs() -> list[dict[str, Any]]:
    return [o["spec"]["template"]["spec"] for o in BASE if o["kind"] in ("Deployment", "Job")]


def _id(obj: dict[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("obj", BASE + BY_HAND, ids=_id)
def test_rendered_object_validates_against_the_kubernetes_schema(obj: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(obj, version, strict=True)


def test_a_misspelt_field_fails_validation() -> None:
    """The check above can fail: strict mode refuses a field Kubernetes does not have."""
    deployment = one("Deployment")
    broken = {**deployment, "spec": {**deployment["spec"], "replica": 2}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSIONS[0], strict=True)


def test_the_kustomization_lists_every_manifest() -> None:
    listed = set(yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"])
    assert listed == {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml", "namespace.yaml",
                                                             "tenant-rolebinding.yaml"}


def test_delete_k_keeps_the_namespace_and_the_secrets_made_by_hand() -> None:
    """`kubectl delete -k` deletes what the kustomization renders: no Namespace, no Secret."""
    assert not [_id(o) for o in BASE + MONITORING if o["kind"] in ("Namespace", "Secret")]
    assert all(o["metadata"].get("namespace") == "evalstop" for o in BASE if o["kind"] != "ClusterRole")


def test_the_deployment_runs_two_probed_replicas_with_a_pdb() -> None:
    deployment = one("Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert one("PodDisruptionBudget")["spec"]["minAvailable"] == 1
    assert one("Job")["spec"]["template"]["spec"]["containers"][0]["args"] == ["--migrate-only"]


def test_prestop_waits_for_the_endpoint_to_go_and_the_grace_period_covers_the_drain() -> None:
    pod = one("Deployment")["spec"]["template"]["spec"]
    pre_stop_s = pod["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pre_stop_s >= 5
    from evalstop.service.cli import GRACEFUL_S

    worker_join_s = 10  # the outbox worker's delivery threads (docs/deploy.md, "SIGTERM")
    assert pod["terminationGracePeriodSeconds"] >= pre_stop_s + GRACEFUL_S + worker_join_s


def test_replicas_wait_for_the_schema_and_the_job_stays_for_gitops() -> None:
    pod = one("Deployment")["spec"]["template"]["spec"]
    [init] = pod["initContainers"]
    assert init["image"] == pod["containers"][0]["image"] == one("Job")["spec"]["template"]["spec"][
        "containers"][0]["image"]
    assert init["args"][0] == "--wait-for-schema" and float(init["args"][1]) > 0
    assert {e["name"] for e in init["env"]} == {PREFIX + "DATABASE_URL"}
    assert "ttlSecondsAfterFinished" not in one("Job")["spec"]  # a deleted Job is drift to Argo CD/Flux


def test_no_configmap_holds_a_secret_and_its_name_is_hashed() -> None:
    for cm in [o for o in BASE if o["kind"] == "ConfigMap"]:
        for key, value in cm["data"].items():
            name = key.removeprefix(PREFIX).lower()
            assert name not in SECRET_SETTINGS, f"{key} in ConfigMap {cm['metadata']['name']}"
            if name.endswith("_file"):
                assert value.startswith("/run/secrets/"), (key, value)
            assert not re.search(r"://[^/@\s]*:[^/@\s]*@", value), key  # no URL with a password
        assert re.fullmatch(r"evalstop-[a-z0-9]{10}", cm["metadata"]["name"])  # configMapGenerator
    container = one("Deployment")["spec"]["template"]["spec"]["containers"][0]
    [ref] = container["envFrom"]
    assert ref["configMapRef"]["name"] == one("ConfigMap")["metadata"]["name"]  # a change rolls the pods


def test_every_selector_names_the_instance_and_matches_its_pods() -> None:
    pods = {o["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]:
            o["spec"]["template"]["metadata"]["labels"] for o in BASE if o["kind"] in ("Deployment", "Job")}
    deployment = one("Deployment")
    selectors = [
        deployment["spec"]["selector"]["matchLabels"],
        one("Service")["spec"]["selector"],
        one("PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
        *[c["labelSelector"]["matchLabels"] for c in deployment["spec"]["template"]["spec"][
            "topologySpreadConstraints"]],
        *[p["spec"]["podSelector"]["matchLabels"] for p in BASE if p["kind"] == "NetworkPolicy"],
    ]
    for selector in selectors:
        assert INSTANCE.items() <= selector.items(), selector
        assert selector.items() <= pods[selector["app.kubernetes.io/component"]].items(), selector


def test_the_replicas_spread_over_nodes_per_rollout() -> None:
    [spread] = one("Deployment")["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["whenUnsatisfiable"] == "DoNotSchedule" and spread["maxSkew"] == 1
    assert spread["matchLabelKeys"] == ["pod-template-hash"] and spread["nodeTaintsPolicy"] == "Honor"


def test_the_namespace_enforces_restricted_and_every_pod_meets_it() -> None:
    labels = one("Namespace", BY_HAND)["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"
    for pod in pod_specs():
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        for container in pod["containers"] + pod.get("initContainers", []):
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False and context["capabilities"]["drop"] == ["ALL"]
            assert context["readOnlyRootFilesystem"] is True
        for volume in pod["volumes"]:
            assert set(volume) - {"name"} <= RESTRICTED_VOLUMES, volume


def test_every_emptydir_has_a_size_limit() -> None:
    dirs = [v["emptyDir"] for pod in pod_specs() for v in pod["volumes"] if "emptyDir" in v]
    assert dirs and all(d.get("sizeLimit") for d in dirs)


def test_port_8000_is_open_only_to_clients_and_prometheus() -> None:
    policy = one("NetworkPolicy", name="evalstop-server")
    assert policy["spec"]["ingress"]
    for rule in policy["spec"]["ingress"]:
        assert rule.get("from"), "an ingress rule without `from` admits every pod in the cluster"
        assert [p["port"] for p in rule["ports"]] == [8000]
    assert "ingress" not in one("NetworkPolicy", name="evalstop-migrate")["spec"]  # the Job takes no traffic


def test_the_servicemonitor_scrapes_the_service() -> None:
    monitor, service = one("ServiceMonitor", MONITORING), one("Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    ports = {p["name"] for p in service["spec"]["ports"]}
    assert [(e["port"], e["path"]) for e in monitor["spec"]["endpoints"]] == [("http", "/metrics")]
    assert monitor["spec"]["endpoints"][0]["port"] in ports
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"]


def exported_series() -> dict[str, set[str]]:
    """Every series name ServiceMetrics exports, with its label names (one child of each
    labelled metric made so that its samples appear)."""
    metrics = ServiceMetrics()
    for collector in vars(metrics).values():
        names = getattr(collector, "_labelnames", ())
        if names:
            collector.labels(**dict.fromkeys(names, "x"))
    series: dict[str, set[str]] = {}
    for family in metrics.registry.collect():
        for sample in family.samples:
            series.setdefault(sample.name, set()).update(sample.labels)
    return series


def named_series(expr: str) -> dict[str, set[str]]:
    """The series an expression selects, with the label names its matchers use."""
    found: dict[str, set[str]] = {}
    for name, matchers in re.findall(r"([a-zA-Z_:][\w:]*)(?:\{([^}]*)\})?\s*(?=\[|\)|\s|$|<|>|=|\{)",
                                     expr):
        if matchers or re.search(rf"\b{re.escape(name)}\s*[\[{{]", expr):
            found.setdefault(name, set()).update(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", matchers))
    return found


def unknown_series(expr: str, exported: dict[str, set[str]]) -> list[str]:
    known = {**exported, **EXTERNAL_SERIES}
    bad = []
    for name, labels in named_series(expr).items():
        if name not in known:
            bad.append(name)
        elif not labels <= known[name]:
            bad.append(f"{name}{{{','.join(sorted(labels - known[name]))}}}")
    return bad


def test_every_alert_names_series_the_service_exports() -> None:
    exported = exported_series()
    assert "evalstop_adapter_errors_total" in exported and "evalstop_ingest_seconds_bucket" in exported
    assert "evalstop_outbox_pending" in exported and "evalstop_rule_errors_total" in exported
    rules = [r for g in one("PrometheusRule", MONITORING)["spec"]["groups"] for r in g["rules"]]
    alerts = {r["alert"] for r in rules}
    assert {"EvalstopReplicaDown", "EvalstopStopsFailing", "EvalstopStopsNotDelivered",
            "EvalstopOutboxBacklog", "EvalstopOutboxGrowing", "EvalstopRuleErrors"} <= alerts
    for rule in rules:
        assert named_series(rule["expr"]), rule["alert"]
        assert unknown_series(rule["expr"], exported) == [], rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical") and rule["annotations"]["summary"]


def test_a_misnamed_series_or_label_is_caught() -> None:
    exported = exported_series()
    assert unknown_series('rate(evalstop_stops_failed_total{target="ray"}[5m]) > 0', exported) == [
        "evalstop_stops_failed_total"]
    assert unknown_series('increase(evalstop_adapter_errors_total{tenant="a"}[5m])', exported) == [
        "evalstop_adapter_errors_total{tenant}"]


def _env_names(obj: dict[str, Any]) -> list[str]:
    """The variable names an object sets: a ConfigMap's keys, each container's ``env``."""
    if obj["kind"] == "ConfigMap":
        return list(obj.get("data", {}))
    pod = obj.get("spec", {}).get("template", {}).get("spec", {})
    containers = pod.get("containers", []) + pod.get("initContainers", [])
    return [e["name"] for c in containers for e in c.get("env", [])]


def _unknown_settings(names: list[str]) -> list[str]:
    fields = {PREFIX + name.upper() for name in ServiceSettings.model_fields}
    return [n for n in names if n.startswith(PREFIX) and n not in fields]


def test_manifests_name_only_settings_the_service_has() -> None:
    names = [n for obj in BASE for n in _env_names(obj)]
    assert PREFIX and any(n.startswith(PREFIX) for n in names)
    assert _unknown_settings(names) == []


def test_an_unknown_setting_is_caught() -> None:
    assert _unknown_settings([PREFIX + "ADMIN_TOKEN_FILE", PREFIX + "WORKER_LEASE_SECONDS"]) == [
        PREFIX + "WORKER_LEASE_SECONDS"]


def test_the_configmap_values_are_valid_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ConfigMap's values, as the replicas read them (files standing in for the mounted
    Secrets, a database URL for the Secret env), make a valid ServiceSettings."""
    stand_ins = {PREFIX + "ADMIN_TOKEN_FILE": "t0ken\n",
                 PREFIX + "ADAPTER_SETTINGS_FILE": '{"kubernetes": {"timeout_s": 10}}'}
    for key, value in one("ConfigMap")["data"].items():
        if key in stand_ins:
            path = tmp_path / key
            path.write_text(stand_ins[key])
            value = str(path)
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(PREFIX + "DATABASE_URL", "postgresql://evalstop@db/evalstop")
    settings = ServiceSettings()
    assert settings.migrate_on_start is False
    assert settings.admin_token is not None and settings.admin_token.get_secret_value() == "t0ken"
    assert settings.adapter_settings == {"kubernetes": {"timeout_s": 10}}


def test_the_compose_file_names_only_settings_the_service_has() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    names = [n for s in services.values() for n in (s.get("environment") or {})]
    assert any(n.startswith(PREFIX) for n in names)
    assert _unknown_settings(names) == []


def test_the_admin_token_file_is_read_and_checked(tmp_path: Path) -> None:
    token = tmp_path / "t"
    token.write_text("  s3cret\n")
    assert ServiceSettings(admin_token_file=token).admin_token.get_secret_value() == "s3cret"  # type: ignore[union-attr]
    token.write_text("\n")
    with pytest.raises(ValidationError, match=r"admin_token_file .* is empty"):
        ServiceSettings(admin_token_file=token)
    with pytest.raises(ValidationError, match="cannot be read"):
        ServiceSettings(admin_token_file=tmp_path / "missing")
    with pytest.raises(ValidationError, match="both set"):
        ServiceSettings(admin_token_file=token, admin_token="x")
