"""Static checks of the compose and Kubernetes files (no Docker engine or cluster here): they
parse, run every service with the command the code has, use only registered settings, and
scale generators on the stream and group the code uses."""

from pathlib import Path

import pytest

from spex.proto.names import DEFAULT_POOL, GENERATOR_GROUP, gen_jobs
from spex.shared.runtime.settings import ENV

yaml = pytest.importorskip("yaml")
ROOT = Path(__file__).resolve().parents[2]
SERVICES = {"ingress", "coordinator", "generator", "scorer", "allocator"}


def test_compose_runs_every_service_with_registered_settings():
    doc = yaml.safe_load((ROOT / "compose" / "docker-compose.yml").read_text())
    services = doc["services"]
    assert set(services) >= SERVICES
    for name in SERVICES:
        svc = services[name]
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


def test_kubernetes_deployments_match_the_services():
    docs = list(yaml.safe_load_all((ROOT / "k8s" / "spex.yaml").read_text()))
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    config = next(d for d in docs if d["kind"] == "ConfigMap")
    assert set(config["data"]) <= set(ENV)
    roles = set()
    for dep in deployments.values():
        spec = dep["spec"]
        assert spec["selector"]["matchLabels"] == spec["template"]["metadata"]["labels"]
        (container,) = spec["template"]["spec"]["containers"]
        role = container["args"][1]
        roles.add(role)
        assert container["args"] == ["worker", role]
        assert {e["name"] for e in container.get("env", [])} <= set(ENV)
        assert "livenessProbe" in container and "readinessProbe" in container
        assert container["resources"]["requests"]
    assert roles == SERVICES
    assert config["data"]["SPEX_REDIS_PASSWORD_FILE"] == "/etc/spex-redis/password"
    for dep in deployments.values():  # every service reads the Redis password from the Secret
        pod = dep["spec"]["template"]["spec"]
        secrets = {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
        assert "spex-redis" in secrets
        mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
        assert "/etc/spex-redis" in mounts


def test_kubernetes_redis_persists_on_a_volume_with_a_password_from_a_secret():
    docs = list(yaml.safe_load_all((ROOT / "k8s" / "spex.yaml").read_text()))
    (redis,) = [d for d in docs if d["kind"] == "StatefulSet"]
    (container,) = redis["spec"]["template"]["spec"]["containers"]
    args = " ".join(container["args"])
    assert "--appendonly yes --appendfsync everysec" in args and "--dir /data" in args
    assert "--include /etc/spex-redis/redis.conf" in args and "requirepass" not in args
    (claim,) = redis["spec"]["volumeClaimTemplates"]
    assert {"name": "data", "mountPath": "/data"} in container["volumeMounts"]
    assert claim["metadata"]["name"] == "data"
    assert not [d for d in docs if d["kind"] == "Secret"]  # secrets are created, never committed


def test_generators_scale_on_their_job_stream():
    docs = list(yaml.safe_load_all((ROOT / "k8s" / "spex.yaml").read_text()))
    (scaled,) = [d for d in docs if d["kind"] == "ScaledObject"]
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "redis-streams"
    assert trigger["metadata"]["stream"] == gen_jobs(DEFAULT_POOL)
    assert trigger["metadata"]["consumerGroup"] == GENERATOR_GROUP
    assert scaled["spec"]["scaleTargetRef"]["name"] == "spex-generator"


def test_dockerfile_installs_the_packages_the_entry_point_needs():
    text = (ROOT / "Dockerfile").read_text()
    for package in ("proto", "shared", "services", "bench", "data"):
        assert f"COPY {package} ./{package}" in text
    assert 'ENTRYPOINT ["spex"]' in text
