"""The GPU deployment, as files: in the gpu-sglang overlay one GPU pod holds an SGLang server
(a native sidecar on 127.0.0.1, one GPU, probed on /health, weights read-only from the models
volume) and the SPEX worker that talks to it; compose's `gpu` profile pairs a server on one GPU
with a generator; every file names the same SGLang image."""

import re

import pytest

from spex.shared.runtime.settings import ENV
from tests.deploy.manifests import (
    ROOT,
    argv,
    compose,
    compose_env,
    effective_env,
    flag,
    image_name,
    of_kind,
    render,
    url_port,
)

# (Deployment, worker container, the server's --model-path, the worker's model and URL settings)
GPU_PODS = [
    ("spex-generator", "generator", "/models/generator", "SPEX_MODEL", "SPEX_ENGINE_URL"),
    ("spex-scorer", "scorer", "/models/prm", "SPEX_PRM", "SPEX_PRM_URL"),
]
SGLANG_FLAGS = (
    "--enable-priority-scheduling",
    "--schedule-low-priority-values-first",
    "--enable-metrics",
    "--enable-deterministic-inference",
)


def env_of(container):
    return {e["name"]: e.get("value") for e in container.get("env", [])}


@pytest.mark.parametrize(("name", "worker_name", "model_path", "model_var", "url_var"), GPU_PODS)
def test_a_gpu_pod_runs_the_server_beside_its_worker(name, worker_name, model_path, model_var, url_var):
    docs = render("gpu-sglang")
    pod = of_kind(docs, "Deployment")[name]["spec"]["template"]["spec"]
    (server,) = pod["initContainers"]
    (worker,) = pod["containers"]
    assert server["restartPolicy"] == "Always"  # a native sidecar: starts first, stops last
    assert image_name(server["image"]) == "sglang" and image_name(worker["image"]) == "spex-gpu"
    args = argv(server)
    assert args[:3] == ["python3", "-m", "sglang.launch_server"]
    assert flag(args, "--model-path") == model_path and flag(args, "--host") == "127.0.0.1"
    assert server["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert "nvidia.com/gpu" not in worker["resources"].get("limits", {})
    # The worker talks to this server, and reads the same weights' tokenizer.
    env = effective_env(worker, of_kind(docs, "ConfigMap"))
    if url_var == "SPEX_ENGINE_URL":  # the generator's engine; a PRM server needs only its URL
        assert env["SPEX_ENGINE"] == "sglang"
    assert env[url_var].startswith("http://127.0.0.1:")
    assert url_port(env[url_var]) == int(flag(args, "--port"))
    assert env[model_var] == model_path
    # Model loading takes minutes: the startup probe allows for it, then readiness takes over.
    startup = server["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600
    assert "readinessProbe" in server and "readinessProbe" in worker
    # Weights read-only from the models claim; SGLang's shared memory in RAM.
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["models"]["persistentVolumeClaim"] == {"claimName": "spex-models", "readOnly": True}
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
    mounts = {m["mountPath"]: m for m in server["volumeMounts"]}
    assert mounts["/models"]["readOnly"] and mounts["/dev/shm"]["name"] == "dshm"
    assert {"name": "models", "mountPath": "/models", "readOnly": True} in worker["volumeMounts"]
    # Only GPU nodes, and the taint that keeps everything else off them.
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]


def test_the_generator_server_schedules_by_priority_with_seeds_honoured():
    pod = of_kind(render("gpu-sglang"), "Deployment")["spex-generator"]["spec"]["template"]["spec"]
    args = argv(pod["initContainers"][0])
    assert set(SGLANG_FLAGS) <= set(args)
    assert int(env_of(pod["containers"][0])["SPEX_WORKER_SLOTS"]) >= 1
    scorer = of_kind(render("gpu-sglang"), "Deployment")["spex-scorer"]["spec"]["template"]["spec"]
    assert "--is-embedding" in argv(scorer["initContainers"][0])


def test_gpu_overlay_routes_by_affinity_and_writes_real_text():
    docs = render("gpu-sglang")
    data = of_kind(docs, "ConfigMap")["spex-env"]["data"]
    assert data["SPEX_AFFINITY"] == "1" and data["SPEX_CONTENT"] == "real"
    # Every service sees the engine (the coordinator's copy is what each answer names); its URL
    # is the sidecar's on 127.0.0.1, which only a generator pod uses.
    assert data["SPEX_ENGINE"] == "sglang" and data["SPEX_ENGINE_URL"] == "http://127.0.0.1:30000"
    for name, dep in of_kind(docs, "Deployment").items():
        if name not in {n for n, *_ in GPU_PODS}:
            pod = dep["spec"]["template"]["spec"]
            assert "initContainers" not in pod and image_name(pod["containers"][0]["image"]) == "spex"


def test_sim_overlay_is_cpu_only():
    docs = render("sim")
    assert of_kind(docs, "ConfigMap")["spex-env"]["data"]["SPEX_ENGINE"] == "sim"
    for dep in of_kind(docs, "Deployment").values():
        pod = dep["spec"]["template"]["spec"]
        assert "initContainers" not in pod and "nodeSelector" not in pod
        (c,) = pod["containers"]
        assert image_name(c["image"]) == "spex" and "nvidia.com/gpu" not in c["resources"].get("limits", {})


def test_compose_gpu_profile_pairs_a_server_on_one_gpu_with_a_generator():
    services = compose()["services"]
    gpu = {name for name, svc in services.items() if "gpu" in svc.get("profiles", [])}
    assert gpu == {"sglang-0", "generator-gpu-0"}
    server, generator = services["sglang-0"], services["generator-gpu-0"]
    (device,) = server["deploy"]["resources"]["reservations"]["devices"]
    assert device == {"driver": "nvidia", "device_ids": ["0"], "capabilities": ["gpu"]}
    args = server["command"]
    assert args[:3] == ["python3", "-m", "sglang.launch_server"] and set(SGLANG_FLAGS) <= set(args)
    port = int(flag(args, "--port"))
    assert f"127.0.0.1:{port}/health" in " ".join(server["healthcheck"]["test"])
    assert server["shm_size"] and "../models:/models:ro" in server["volumes"]
    assert not server.get("ports")  # the server has no auth: only the compose network reaches it
    env = compose_env(generator)
    assert set(env) <= set(ENV)
    assert not {k for k in compose_env(server) if k.startswith("SPEX_")}
    assert env["SPEX_ENGINE"] == "sglang" and env["SPEX_ENGINE_URL"] == f"http://sglang-0:{port}"
    assert env["SPEX_MODEL"] == flag(args, "--model-path") and env["SPEX_CONSUMER"]
    assert generator["depends_on"]["sglang-0"] == {"condition": "service_healthy"}
    assert generator["depends_on"]["redis"] == {"condition": "service_healthy"}
    assert generator["build"]["dockerfile"] == "docker/gpu.Dockerfile"
    assert (ROOT / "compose" / generator["build"]["context"] / generator["build"]["dockerfile"]).exists()


def test_every_file_names_the_same_sglang_image():
    dockerfile = (ROOT / "docker" / "gpu.Dockerfile").read_text()
    (base,) = re.findall(r"^ARG SGLANG_IMAGE=(\S+)$", dockerfile, re.M)
    assert "FROM ${SGLANG_IMAGE}" in dockerfile
    images = {
        c["image"]
        for d in render("gpu-sglang")
        if d["kind"] == "Deployment"
        for c in d["spec"]["template"]["spec"].get("initContainers", [])
    }
    assert images == {base} == {compose()["services"]["sglang-0"]["image"]}
