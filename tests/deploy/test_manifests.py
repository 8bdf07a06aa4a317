"""The deployment files: every Kubernetes object validates against the Kubernetes OpenAPI schema
(kubernetes-validate, strict: an unknown field is an error), and every ``EVALSTOP_*`` variable a
manifest or the compose file sets is a field of ``ServiceSettings`` whose value it accepts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from evalstop.service.settings import ServiceSettings

kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="pip install -e '.[dev]'")

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "kubernetes"
COMPOSE = ROOT / "deploy" / "compose" / "compose.yaml"
K8S_VERSION = "1.30.0"
PREFIX = str(ServiceSettings.model_config.get("env_prefix", ""))


def _objects() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        found += [(path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return found


def _env_names(obj: dict[str, Any]) -> list[str]:
    """The variable names an object sets: a ConfigMap's keys, each container's ``env``."""
    if obj["kind"] == "ConfigMap":
        return list(obj.get("data", {}))
    spec = obj.get("spec", {})
    pod = spec.get("template", {}).get("spec", {})
    containers = pod.get("containers", []) + pod.get("initContainers", [])
    return [e["name"] for c in containers for e in c.get("env", [])]


def _unknown_settings(names: list[str]) -> list[str]:
    fields = {PREFIX + name.upper() for name in ServiceSettings.model_fields}
    return [n for n in names if n.startswith(PREFIX) and n not in fields]


@pytest.mark.parametrize(("name", "obj"), _objects(), ids=lambda v: v if isinstance(v, str) else "")
def test_manifest_validates_against_the_kubernetes_schema(name: str, obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_a_misspelt_field_fails_validation() -> None:
    """The check above can fail: strict mode refuses a field Kubernetes does not have."""
    deployment = next(o for _, o in _objects() if o["kind"] == "Deployment")
    broken = {**deployment, "spec": {**deployment["spec"], "replica": 2}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_the_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml", "tenant-rolebinding.yaml"}
    assert listed == on_disk


def test_the_deployment_runs_two_probed_replicas_with_a_pdb() -> None:
    objects = {o["kind"]: o for _, o in _objects()}
    deployment = objects["Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert deployment["spec"]["replicas"] == 2
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert objects["PodDisruptionBudget"]["spec"]["minAvailable"] == 1
    assert objects["Job"]["spec"]["template"]["spec"]["containers"][0]["args"] == ["--migrate-only"]


def test_manifests_name_only_settings_the_service_has() -> None:
    names = [n for _, obj in _objects() for n in _env_names(obj)]
    assert PREFIX and any(n.startswith(PREFIX) for n in names)
    assert _unknown_settings(names) == []


def test_an_unknown_setting_is_caught() -> None:
    assert _unknown_settings([PREFIX + "ADMIN_TOKEN_FILE", PREFIX + "WORKER_LEASE_SECONDS"]) == [
        PREFIX + "WORKER_LEASE_SECONDS"]


def test_the_configmap_values_are_valid_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ConfigMap's values, as the replicas read them (with a token file and a database URL
    standing in for the Secrets), make a valid ServiceSettings."""
    data = next(o for _, o in _objects() if o["kind"] == "ConfigMap")["data"]
    token = tmp_path / "admin-token"
    token.write_text("t0ken\n")
    for key, value in data.items():
        monkeypatch.setenv(key, str(token) if key == PREFIX + "ADMIN_TOKEN_FILE" else value)
    monkeypatch.setenv(PREFIX + "DATABASE_URL", "postgresql://evalstop@db/evalstop")
    settings = ServiceSettings()
    assert settings.migrate_on_start is False
    assert settings.admin_token is not None and settings.admin_token.get_secret_value() == "t0ken"


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
