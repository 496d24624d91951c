"""The fleet overlay: SPEX in front of a vLLM or SGLang fleet the user runs. No engine sidecars and
no GPU requests in SPEX's pods; the engine's and the reward model's URLs are set in one place,
the spex-env ConfigMap of fleet.yaml, and nowhere else; one generator per engine replica (a fixed
count, no KEDA); a generator is ready while its engine answers and waits SPEX_ENGINE_WAIT_S for
it at its start; the generators and the scorer read the served models' tokenizers."""

import re

from spex.shared.engine.api import SERVERS
from spex.shared.runtime.settings import Settings
from tests.deploy.manifests import (
    ROOT,
    containers,
    effective_env,
    image_name,
    is_spex,
    of_kind,
    pod_templates,
    render,
    yaml,
)

FLEET = ROOT / "k8s" / "overlays" / "fleet"
URLS = ("SPEX_ENGINE_URL", "SPEX_PRM_URL")


def test_no_spex_pod_runs_an_engine_or_asks_for_a_gpu():
    docs = render("fleet")
    for deployment in of_kind(docs, "Deployment").values():
        pod = deployment["spec"]["template"]["spec"]
        assert "initContainers" not in pod and "nodeSelector" not in pod, deployment["metadata"]["name"]
        assert all(is_spex(c) for c in pod["containers"]), deployment["metadata"]["name"]
    for _, template in pod_templates(docs):
        for c in containers(template["spec"]):
            assert "nvidia.com/gpu" not in c["resources"].get("limits", {}), c["name"]


def test_the_fleets_urls_are_set_once_in_the_configmap_the_user_edits():
    docs = render("fleet")
    data = of_kind(docs, "ConfigMap")["spex-env"]["data"]
    edited = yaml.safe_load((FLEET / "fleet.yaml").read_text())
    assert edited["metadata"]["name"] == "spex-env" and set(URLS) <= set(edited["data"])
    settings = Settings.from_env(data)  # every value as the services read it
    assert settings.engine in SERVERS and settings.engine_url.startswith("http://")
    assert settings.prm and settings.prm_url.startswith("http://") and data["SPEX_PRM_ENGINE"] in SERVERS
    assert settings.content == "real" and settings.affinity
    # Nowhere else: no container overrides what fleet.yaml says.
    for _, template in pod_templates(docs):
        for c in containers(template["spec"]):
            assert not {e["name"] for e in c.get("env", [])} & {*URLS, "SPEX_ENGINE", "SPEX_PRM_ENGINE"}


def test_one_generator_per_engine_replica_at_a_fixed_count():
    docs = render("fleet")
    kustomization = yaml.safe_load((FLEET / "kustomization.yaml").read_text())
    (count,) = [r["count"] for r in kustomization["replicas"] if r["name"] == "spex-generator"]
    assert of_kind(docs, "Deployment")["spex-generator"]["spec"]["replicas"] == count >= 1
    assert not of_kind(docs, "ScaledObject")  # KEDA would scale generators past the fleet's replicas


def test_a_generator_is_ready_while_its_engine_answers_and_waits_for_it_at_start():
    docs = render("fleet")
    configmaps = of_kind(docs, "ConfigMap")
    (generator,) = of_kind(docs, "Deployment")["spex-generator"]["spec"]["template"]["spec"]["containers"]
    probe = generator["readinessProbe"]
    assert set(probe) & {"httpGet", "tcpSocket", "grpc", "exec"} == {"exec"}
    assert re.search(r"os\.environ\['SPEX_ENGINE_URL'\].*'/health'", " ".join(probe["exec"]["command"]))
    assert "livenessProbe" in generator  # its own process, not the engine: an engine outage is no restart
    env = effective_env(generator, configmaps)
    assert Settings.from_env(env).engine_wait_s >= 600  # a replica loading its model answers after minutes


def test_the_generators_and_the_scorer_read_the_served_models_tokenizers():
    docs = render("fleet")
    configmaps = of_kind(docs, "ConfigMap")
    for name, var in (("spex-generator", "SPEX_MODEL"), ("spex-scorer", "SPEX_PRM")):
        pod = of_kind(docs, "Deployment")[name]["spec"]["template"]["spec"]
        (c,) = pod["containers"]
        path = effective_env(c, configmaps)[var]
        assert image_name(c["image"]) == "spex-vllm"  # transformers, for the tokenizer
        mounts = [m for m in c["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
        (mount,) = mounts
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        assert volume["persistentVolumeClaim"] == {"claimName": "spex-models", "readOnly": True}
