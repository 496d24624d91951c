"""Static checks of the compose file, the rendered Kubernetes overlays and the images (no Docker
engine or cluster here): every service runs with the command the code has, Redis persists on a
volume with its password from a secret, and generators scale on the stream and group the code
uses."""

import pytest

from spex.proto.names import DEFAULT_POOL, GENERATOR_GROUP, gen_jobs
from spex.shared.runtime.settings import ENV
from tests.deploy.manifests import (
    KEDA_OVERLAYS,
    OVERLAYS,
    ROOT,
    SERVICES,
    argv,
    compose,
    containers,
    is_spex,
    of_kind,
    render,
)

PACKAGES = ("proto", "search", "shared", "services", "bench", "data")


def test_compose_runs_every_service_with_registered_settings():
    doc = compose()
    services = doc["services"]
    assert set(services) >= SERVICES
    for name in SERVICES:
        svc = services[name]
        assert "profiles" not in svc  # `docker compose up` with no profile: the sim deployment
        assert svc["command"] == ["worker", name]
        assert set(svc["environment"]) <= set(ENV)
        assert svc["depends_on"]["redis"]["condition"] == "service_healthy"
    redis = services["redis"]
    assert "redis-cli ping" in redis["healthcheck"]["test"][-1]
    command = " ".join(redis["command"])
    assert "--appendonly yes --appendfsync everysec" in command  # streams survive a restart
    assert redis["volumes"] == ["redis-data:/data"] and "--dir /data" in command
    # The password is a file from a compose secret, never on a command line or in the file.
    assert "requirepass" not in command.split("redis-server", 1)[1]
    assert set(doc["secrets"]) == {"redis_password", "ingress_tokens"}
    for name in SERVICES:
        assert services[name]["environment"]["SPEX_REDIS_PASSWORD_FILE"] == "/run/secrets/redis_password"
        assert "redis_password" in services[name]["secrets"]
    assert services["ingress"]["environment"]["SPEX_AUTH_TOKENS_FILE"] == "/run/secrets/ingress_tokens"


def test_the_flat_manifest_is_gone():
    assert not (ROOT / "k8s" / "spex.yaml").exists()  # k8s/base + k8s/overlays replace it


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_kubernetes_deployments_match_the_services(overlay):
    docs = render(overlay)
    deployments = of_kind(docs, "Deployment")
    config = of_kind(docs, "ConfigMap")["spex-env"]
    assert config["metadata"]["name"] == "spex-env"
    roles = set()
    for dep in deployments.values():
        spec = dep["spec"]
        assert spec["selector"]["matchLabels"] == spec["template"]["metadata"]["labels"]
        (container,) = spec["template"]["spec"]["containers"]  # a GPU pod's engine is a sidecar
        if not is_spex(container):  # a server of its own (gpu-vllm's reward model)
            continue
        role = container["args"][1]
        roles.add(role)
        assert container["args"] == ["worker", role] and container["name"] == role
        assert "livenessProbe" in container and "readinessProbe" in container
    assert roles == SERVICES
    assert deployments["spex-coordinator"]["spec"]["replicas"] == 2
    assert config["data"]["SPEX_REDIS_PASSWORD_FILE"] == "/etc/spex-redis/password"
    for dep in deployments.values():  # every service reads the Redis password from the Secret
        pod = dep["spec"]["template"]["spec"]
        if not is_spex(pod["containers"][0]):
            continue
        secrets = {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
        assert "spex-redis" in secrets
        mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
        assert "/etc/spex-redis" in mounts


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_requests_resources_and_limits_memory(overlay):
    for doc in render(overlay):
        if doc["kind"] in ("Deployment", "StatefulSet"):
            for c in containers(doc["spec"]["template"]["spec"]):
                assert {"cpu", "memory"} <= set(c["resources"]["requests"]), c["name"]
                assert "memory" in c["resources"]["limits"], c["name"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_kubernetes_redis_persists_on_a_volume_with_a_password_from_a_secret(overlay):
    docs = render(overlay)
    (redis,) = of_kind(docs, "StatefulSet").values()
    (container,) = redis["spec"]["template"]["spec"]["containers"]
    args = " ".join(argv(container))
    assert "--appendonly yes --appendfsync everysec" in args and "--dir /data" in args
    assert "--include /etc/spex-redis/redis.conf" in args and "requirepass" not in args
    (claim,) = redis["spec"]["volumeClaimTemplates"]
    assert {"name": "data", "mountPath": "/data"} in container["volumeMounts"]
    assert claim["metadata"]["name"] == "data"
    (service,) = [
        s for s in of_kind(docs, "Service").values() if s["metadata"]["name"] == redis["spec"]["serviceName"]
    ]
    assert service["spec"]["clusterIP"] == "None"  # headless: the StatefulSet's governing Service
    assert not [d for d in docs if d["kind"] == "Secret"]  # secrets are created, never committed


@pytest.mark.parametrize("overlay", KEDA_OVERLAYS)
def test_generators_scale_on_the_lag_of_the_shared_job_stream(overlay):
    docs = render(overlay)
    (scaled,) = of_kind(docs, "ScaledObject").values()
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "redis-streams"
    assert trigger["metadata"]["stream"] == gen_jobs(DEFAULT_POOL)
    assert trigger["metadata"]["consumerGroup"] == GENERATOR_GROUP
    assert "lagCount" in trigger["metadata"] and "pendingEntriesCount" not in trigger["metadata"]
    assert trigger["metricType"] == "Value"  # the lag is excess demand (keda.yaml says why)
    assert scaled["spec"]["scaleTargetRef"]["name"] in of_kind(docs, "Deployment")
    assert scaled["spec"]["scaleTargetRef"]["name"] == "spex-generator"
    # KEDA's operator dials from its own namespace: the address names the Redis Service's.
    host = trigger["metadata"]["address"].rsplit(":", 1)[0]
    assert host == f"redis.{scaled['metadata']['namespace']}.svc"
    (auth,) = of_kind(docs, "TriggerAuthentication").values()
    assert trigger["authenticationRef"]["name"] == auth["metadata"]["name"]
    assert auth["spec"]["secretTargetRef"] == [
        {"parameter": "password", "name": "spex-redis", "key": "password"}
    ]


def test_dockerfile_installs_the_packages_the_entry_point_needs():
    for path in ("Dockerfile", "docker/gpu.Dockerfile", "docker/vllm.Dockerfile"):
        text = (ROOT / path).read_text()
        for package in PACKAGES:
            assert f"COPY {package} ./{package}" in text, path
        assert "COPY pyproject.toml README.md ./" in text and "pip install --no-cache-dir ." in text
        assert 'ENTRYPOINT ["spex"]' in text
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", "models", "compose/redis.password", "compose/tokens"} <= set(ignored)
    assert not set(PACKAGES) & set(ignored)
