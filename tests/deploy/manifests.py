"""Rendering and walking the deployment files for the static checks in this folder (no Docker
engine or cluster here: what can be checked is what the files say)."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spex.shared.runtime.settings import ENV

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
OVERLAYS = ("sim", "gpu-sglang", "gpu-vllm", "fleet")
KEDA_OVERLAYS = ("sim", "gpu-sglang", "gpu-vllm")  # generators scaled by KEDA (fleet: the fleet's count)
SERVICES = {"ingress", "coordinator", "generator", "scorer", "allocator"}
WORKLOADS = {"Deployment", "StatefulSet"}
SPEX_IMAGES = {"spex", "spex-gpu", "spex-vllm"}  # images whose entry point is the `spex` CLI
KNOWN_SETTINGS = frozenset(ENV)
COMPOSE = ROOT / "compose" / "docker-compose.yml"


@functools.cache
def render(overlay: str) -> tuple[dict[str, Any], ...]:
    """`kubectl kustomize k8s/overlays/<overlay>`, parsed (once per test session)."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip(
            "kubectl is not installed: the kustomize overlays cannot be rendered (apt install kubectl)"
        )
    out = subprocess.run(
        [kubectl, "kustomize", str(ROOT / "k8s" / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, f"kubectl kustomize {overlay} failed:\n{out.stderr}"
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def of_kind(docs: tuple[dict[str, Any], ...], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def pod_templates(docs: tuple[dict[str, Any], ...]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(workload, pod template) for every Deployment and StatefulSet."""
    for d in docs:
        if d["kind"] in WORKLOADS:
            yield d, d["spec"]["template"]


def containers(pod_spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Every container of a pod, init and sidecar containers included."""
    return [*pod_spec.get("initContainers", []), *pod_spec["containers"]]


def image_name(image: str) -> str:
    """`registry/spex-gpu:tag` -> `spex-gpu`."""
    return image.rsplit("/", 1)[-1].split("@")[0].split(":")[0]


def is_spex(container: dict[str, Any]) -> bool:
    return image_name(container["image"]) in SPEX_IMAGES and "command" not in container


def argv(container: dict[str, Any]) -> list[str]:
    return [*container.get("command", []), *container.get("args", [])]


def flag(args: list[str], name: str) -> str:
    """The value after `name` in an argument list."""
    assert name in args, f"{name} missing from {args}"
    return args[args.index(name) + 1]


def url_port(url: str) -> int:
    m = re.search(r"://[^/:]+:(\d+)", url)
    assert m, f"no port in {url!r}"
    return int(m.group(1))


def effective_env(container: dict[str, Any], configmaps: dict[str, dict[str, Any]]) -> dict[str, str]:
    """What the container's process sees: its envFrom ConfigMaps, then its own `env` (which
    wins); a fieldRef becomes a stand-in pod name."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        ref = source["configMapRef"]["name"]
        assert ref in configmaps, f"envFrom names ConfigMap {ref!r}, which the overlay lacks"
        env.update(configmaps[ref].get("data", {}))
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            assert item["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name", item
            env[item["name"]] = "spex-generator-5d9c7-x2x4q"
    return env


def compose_env(service: dict[str, Any]) -> dict[str, str]:
    """A compose service's environment with `${VAR:-default}` taken at its default."""
    return {
        k: re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(v)) for k, v in service.get("environment", {}).items()
    }
