"""The Helm chart (deploy/helm/rankserve), rendered offline by Helm's own Go library.

helm-python-sdk carries Helm v4's SDK as a shared library: `render` is `helm template` (values
merged, checked against values.schema.json, templates executed) with no binary, no cluster and
no network, called in a child process (tests/deploy/helm_child.py). Every manifest is then
validated against the OpenAPI schemas of the newest Kubernetes release that kubernetes-validate
ships, in strict mode (an unknown field fails); the ServiceMonitor, a Prometheus Operator
resource, against that operator's generated models. What only a cluster can show (scheduling,
probes passing, a real rollout) is listed in docs/kubernetes.md.
"""

import base64
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cloudcoil.models.prometheus_operator.v1 import ServiceMonitor
from kubernetes_validate.utils import latest_version

from core.settings import REPO_ROOT, Settings
from tests.deploy.helm_child import RenderFailedError, ValuesRejectedError, helm

CHART = REPO_ROOT / "deploy" / "helm" / "rankserve"
KUBERNETES = latest_version()
GIB = 1024**3

# Every switch on: S3 store with a credentials Secret, tokens, Ingress with TLS, HPA,
# ServiceMonitor, the GPU switch, extra settings.
EVERYTHING: dict[str, Any] = {
    "secrets": {"apiKey": "api-key-123", "adminToken": "admin-token-456"},
    "store": {
        "url": "s3://rankserve-bundles/prod",
        "s3": {
            "endpointUrl": "http://minio.minio.svc:9000",
            "region": "us-east-1",
            "addressingStyle": "path",
            "credentialsSecret": "minio-credentials",
        },
    },
    "settings": {"ANCHOR_COUNT": "10000", "SEARCH_INDEX": "ivf"},
    "api": {"autoscaling": {"enabled": True}, "memory": {"indexGiB": 16.5}},
    "ingress": {
        "enabled": True,
        "className": "nginx",
        "host": "search.example.com",
        "tls": [{"secretName": "search-tls", "hosts": ["search.example.com"]}],
    },
    "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
    "gpu": {"enabled": True},
    "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/r"}},
}


class _UniqueKeyLoader(yaml.SafeLoader):
    """A template that writes one key twice renders YAML that a loader silently collapses."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        keys = [self.construct_object(key, deep=deep) for key, _ in node.value]
        duplicates = {key for key in keys if keys.count(key) > 1}
        if duplicates:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate keys {sorted(duplicates)}", node.start_mark
            )
        return super().construct_mapping(node, deep=deep)


def render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    manifests = helm("render", CHART, values)
    documents = []
    for path, text in sorted(manifests.items()):
        if path.endswith(".yaml"):
            documents.extend(d for d in yaml.load_all(text, Loader=_UniqueKeyLoader) if d)
    return documents


def one(documents: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        d
        for d in documents
        if d["kind"] == kind and (name is None or d["metadata"]["name"].endswith(name))
    ]
    assert len(found) == 1, [(d["kind"], d["metadata"]["name"]) for d in documents]
    return found[0]


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only


def env_of(deployment: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in container(deployment).get("env", [])}


def bytes_of(quantity: str) -> float:
    units = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4, "k": 1e3, "M": 1e6, "G": 1e9}
    number, unit = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", quantity).groups()
    return float(number) * units.get(unit, 1)


def assert_valid(documents: list[dict[str, Any]]) -> None:
    for document in documents:
        if document["kind"] == "ServiceMonitor":
            # Round trip through the operator's models: a field they do not know is dropped,
            # so any difference is a field the CRD would not accept either.
            model = ServiceMonitor.model_validate(document)
            assert model.model_dump(by_alias=True, exclude_unset=True, mode="json") == document
        else:
            kubernetes_validate.validate(document, KUBERNETES, strict=True)


def test_the_schemas_are_of_a_current_kubernetes():
    major, minor = (int(part) for part in KUBERNETES.split(".")[:2])
    assert (major, minor) >= (1, 33)


def test_defaults_render_valid_manifests():
    documents = render()
    kinds = sorted(d["kind"] for d in documents)
    assert kinds == [
        "ConfigMap",
        "Deployment",
        "Deployment",
        "PersistentVolumeClaim",
        "PodDisruptionBudget",
        "Secret",
        "Service",
        "ServiceAccount",
    ]
    assert_valid(documents)


def test_everything_switched_on_renders_valid_manifests():
    documents = render(EVERYTHING)
    kinds = {d["kind"] for d in documents}
    assert {"HorizontalPodAutoscaler", "Ingress", "ServiceMonitor"} <= kinds
    assert "PersistentVolumeClaim" not in kinds  # S3: nothing shared but the bucket
    assert_valid(documents)


def test_lint_finds_nothing_above_info():
    result = helm("lint", CHART)
    assert result["errors"] == []
    assert [m for m in result["messages"] if m["severity"] > 1] == []


def test_api_probes_ports_and_rollout():
    api = one(render(), "Deployment", "-api")
    main = container(api)
    assert main["command"][:2] == ["rankserve", "serve"]
    assert main["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    for probe, path in (("startupProbe", "/ready"), ("readinessProbe", "/ready")):
        assert main[probe]["httpGet"] == {"path": path, "port": "http"}
    assert main["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    # Minutes to load a large index: the startup probe waits long before the kubelet restarts.
    startup = main["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600
    assert api["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}


def _selects(selector: dict[str, str], pod: dict[str, Any]) -> bool:
    labels = pod["spec"]["template"]["metadata"]["labels"]
    return all(labels.get(key) == value for key, value in selector.items())


def test_pdb_spread_service_ingress_and_monitor_point_at_the_api_pods():
    documents = render(EVERYTHING | {"api": {"autoscaling": {"enabled": False}}})
    api, worker = one(documents, "Deployment", "-api"), one(documents, "Deployment", "-worker")
    pdb = one(documents, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    service = one(documents, "Service")
    monitor = one(documents, "ServiceMonitor")
    spread = api["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert {c["topologyKey"] for c in spread} == {
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    }
    selectors = [
        pdb["spec"]["selector"]["matchLabels"],
        service["spec"]["selector"],
        monitor["spec"]["selector"]["matchLabels"],
        *(c["labelSelector"]["matchLabels"] for c in spread),
    ]
    for selector in selectors:
        assert _selects(selector, api) and not _selects(selector, worker)
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["endpoints"][0] | {"interval": None, "scrapeTimeout": None} == {
        "port": "http",
        "path": "/metrics",
        "interval": None,
        "scrapeTimeout": None,
    }
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    ingress = one(documents, "Ingress")
    (rule,) = ingress["spec"]["rules"]
    backend = rule["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": service["metadata"]["name"], "port": {"name": "http"}}
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"][0]["secretName"] == "search-tls"


@pytest.mark.parametrize(("index_gib", "store_gib"), [(0.25, 1), (16.5, 9.5), (40, 0.5)])
def test_api_memory_allows_for_the_swap_peak(index_gib: float, store_gib: float):
    memory = {"baseGiB": 1.5, "modelGiB": 0.5, "indexGiB": index_gib, "rankStoreGiB": store_gib}
    documents = render({"api": {"memory": memory}})
    resources = container(one(documents, "Deployment", "-api"))["resources"]
    request = bytes_of(resources["requests"]["memory"])
    # Old and new engine, index and rank store side by side during a hot swap, plus the process.
    peak = (1.5 + 2 * (0.5 + index_gib + store_gib)) * GIB
    assert peak <= request < peak + 1024**2  # rounded up to 1 MiB
    config = one(documents, "ConfigMap")["data"]
    assert config["RANKSERVE_PRECOMPUTED_RANKS_BUDGET_MB"] == str(int(store_gib * 1024))
    assert resources["limits"]["memory"] == resources["requests"]["memory"]
    assert resources["requests"]["cpu"] == "1"


def test_explicit_memory_wins_over_the_computed_one():
    values = {"api": {"resources": {"requests": {"cpu": "2", "memory": "40Gi"}}}}
    resources = container(one(render(values), "Deployment", "-api"))["resources"]
    assert resources["requests"] == {"cpu": "2", "memory": "40Gi"}
    assert resources["limits"] == {"memory": "40Gi"}


@pytest.mark.parametrize(("grace", "margin"), [(None, None), (600, 30), (0, 1)])
def test_worker_outlives_its_own_shutdown_grace(grace: int | None, margin: int | None):
    values: dict[str, Any] = {}
    if grace is not None:
        values = {"worker": {"shutdownGraceSeconds": grace, "terminationMarginSeconds": margin}}
    worker = one(render(values), "Deployment", "-worker")
    own_grace = float(env_of(worker)["RANKSERVE_WORKER_SHUTDOWN_GRACE_S"]["value"])
    # What the worker process will read, through the one settings class.
    assert Settings(worker_shutdown_grace_s=own_grace).worker_shutdown_grace_s == own_grace
    assert worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > own_grace
    assert container(worker)["command"] == ["rankserve", "worker"]
    if grace is None:
        assert own_grace == Settings.model_fields["worker_shutdown_grace_s"].default


def test_tokens_live_only_in_secrets():
    documents = render(EVERYTHING)
    secret = one(documents, "Secret")
    decoded = {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}
    assert decoded == {"api-key": "api-key-123", "admin-token": "admin-token-456"}
    config = one(documents, "ConfigMap")
    rendered = yaml.safe_dump([d for d in documents if d["kind"] != "Secret"])
    assert "api-key-123" not in rendered and "admin-token-456" not in rendered
    assert not {"RANKSERVE_API_KEY", "RANKSERVE_ADMIN_TOKEN"} & set(config["data"])
    for deployment in (
        one(documents, "Deployment", "-api"),
        one(documents, "Deployment", "-worker"),
    ):
        env = env_of(deployment)
        for variable, key in (
            ("RANKSERVE_API_KEY", "api-key"),
            ("RANKSERVE_ADMIN_TOKEN", "admin-token"),
        ):
            reference = env[variable]["valueFrom"]["secretKeyRef"]
            assert reference == {"name": secret["metadata"]["name"], "key": key, "optional": True}
        for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            reference = env[variable]["valueFrom"]["secretKeyRef"]
            assert reference == {"name": "minio-credentials", "key": variable}

    existing = render({"secrets": {"existingSecret": "ops-tokens"}})
    assert not [d for d in existing if d["kind"] == "Secret"]
    env = env_of(one(existing, "Deployment", "-api"))
    assert env["RANKSERVE_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "ops-tokens"


def test_redis_url_from_a_secret_leaves_the_config_map():
    documents = render({"redis": {"urlSecret": {"name": "redis-auth", "key": "url"}}})
    assert "RANKSERVE_REDIS_URL" not in one(documents, "ConfigMap")["data"]
    env = env_of(one(documents, "Deployment", "-worker"))
    assert env["RANKSERVE_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "redis-auth",
        "key": "url",
    }


def _settings_from(config: dict[str, str]) -> Settings:
    """The settings a pod's process reads from the ConfigMap (names checked on the way)."""
    values = {}
    for name, value in config.items():
        field = name.removeprefix("RANKSERVE_").lower()
        assert name.startswith("RANKSERVE_") and field in Settings.model_fields, name
        values[field] = value
    return Settings(**values)


def test_pods_keep_idle_connections_longer_than_the_proxies_unless_told():
    """ingress-nginx and AWS load balancers keep idle connections to a pod 60 s; closing
    them first would let a proxy send a POST into a closing connection (a 502)."""
    default = _settings_from(one(render(), "ConfigMap")["data"])
    assert default.keep_alive_timeout_s == 75
    chosen = render({"settings": {"KEEP_ALIVE_TIMEOUT_S": "120"}})
    assert _settings_from(one(chosen, "ConfigMap")["data"]).keep_alive_timeout_s == 120


def test_store_modes():
    directory = render()
    settings = _settings_from(one(directory, "ConfigMap")["data"])
    assert settings.store_url is None and settings.bundle_store == Path("/store")
    assert settings.start_redis is False  # a pod never starts its own redis-server
    claim = one(directory, "PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    for name in ("-api", "-worker"):
        pod = one(directory, "Deployment", name)["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["store"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
        mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
        assert mounts == {"var": "/app/var", "store": "/store"}

    s3 = render(EVERYTHING)
    settings = _settings_from(one(s3, "ConfigMap")["data"])
    assert settings.store_url == "s3://rankserve-bundles/prod"
    assert settings.s3_endpoint_url == "http://minio.minio.svc:9000"
    assert (settings.s3_addressing_style, settings.s3_checksums) == ("path", "when_required")
    assert (settings.anchor_count, settings.search_index) == (10000, "ivf")
    assert settings.bundle_store == Path("/app/var/store")  # the pod's own cache
    for name in ("-api", "-worker"):
        pod = one(s3, "Deployment", name)["spec"]["template"]["spec"]
        assert [v["name"] for v in pod["volumes"]] == ["var"]
        assert pod["volumes"][0]["emptyDir"]["sizeLimit"] == "20Gi"


def test_gpu_switch():
    off = render()
    assert "nvidia" not in yaml.safe_dump(off)
    documents = render(EVERYTHING)
    for name in ("-api", "-worker"):
        deployment = one(documents, "Deployment", name)
        pod = deployment["spec"]["template"]["spec"]
        assert container(deployment)["resources"]["limits"]["nvidia.com/gpu"] == 1
        assert container(deployment)["image"] == "rankserve:gpu"
        assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
            "tolerations"
        ]
    worker_only = render({"gpu": {"enabled": True, "api": False}})
    api = one(worker_only, "Deployment", "-api")
    assert "nvidia.com/gpu" not in container(api)["resources"]["limits"]
    assert container(api)["image"] == "rankserve:cpu"
    assert "nodeSelector" not in api["spec"]["template"]["spec"]
    worker = one(worker_only, "Deployment", "-worker")
    assert container(worker)["resources"]["limits"] == {"memory": "8Gi", "nvidia.com/gpu": 1}


def test_autoscaling_owns_the_replica_count():
    documents = render(EVERYTHING)
    api = one(documents, "Deployment", "-api")
    assert "replicas" not in api["spec"]
    hpa = one(documents, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == api["metadata"]["name"]
    (metric,) = hpa["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu"
    assert one(render(), "Deployment", "-api")["spec"]["replicas"] == 2
    with pytest.raises(RenderFailedError, match="minReplicas is larger"):
        render({"api": {"autoscaling": {"enabled": True, "minReplicas": 5, "maxReplicas": 2}}})


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"api": {"replicas": "three"}}, "got string, want integer"),
        ({"worker": {"shutdownGraceSeconds": 1.5}}, "want integer"),
        ({"api": {"memory": {"indexGiB": "2Gi"}}}, "want number"),
        ({"gpu": {"enabled": "yes"}}, "want boolean"),
        ({"replicas": 3}, "additional properties 'replicas' not allowed"),
        ({"api": {"pdb": {"enabled": True, "maxUnavailable": 0}}}, "maxUnavailable"),
        ({"store": {"url": "https://bucket.example.com/prefix"}}, "does not match pattern"),
        ({"store": {"s3": {"checksums": "always"}}}, "checksums"),
        ({"settings": {"ADMIN_TOKEN": "in a ConfigMap"}}, "invalid propertyName 'ADMIN_TOKEN'"),
        ({"settings": {"ANCHOR_COUNT": 10000}}, "want string"),
    ],
)
def test_schema_rejects_wrong_values(values: dict[str, Any], message: str):
    with pytest.raises(ValuesRejectedError, match=re.escape(message)):
        helm("validate", CHART, values)
    # `helm install` and `helm template` apply the same schema before any template runs.
    with pytest.raises(ValuesRejectedError, match=re.escape(message)):
        render(values)


def test_image_matches_the_chart():
    """The image runs as the chart's user, holds every layer and can reach S3."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    uid = values["podSecurityContext"]["runAsUser"]
    for name in ("Dockerfile", "Dockerfile.gpu"):
        text = (REPO_ROOT / "deploy" / name).read_text()
        assert f"--uid {uid} " in text, name
        copied = set(re.findall(r"^COPY\s+(\S+)\s+\S+$", text, flags=re.MULTILINE))
        assert {"models", "core", "service", "worker", "cli"} <= copied, name
        assert re.search(r"pip install '\.\[[a-z,]*s3[a-z,]*\]'", text), name
