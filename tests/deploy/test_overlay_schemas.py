"""Every rendered object passes schema validation: Kubernetes' own kinds with kubernetes-validate
(its bundled OpenAPI schemas, strict: unknown fields are errors), KEDA's with the hand-written
subset of KEDA's published CRD schemas in keda_schema.py (no download at test time)."""

import copy

import pytest

from tests.deploy.keda_schema import REDIS_STREAMS_PARAMETERS, SCALED_OBJECT, TRIGGER_AUTHENTICATION
from tests.deploy.manifests import KEDA_OVERLAYS, OVERLAYS, of_kind, render

kubernetes_validate = pytest.importorskip("kubernetes_validate")
jsonschema = pytest.importorskip("jsonschema")

# The oldest Kubernetes the manifests are for: 1.29 turned native sidecars (an init container
# with restartPolicy Always, the GPU overlay's engine) on by default.
KUBERNETES = "1.29"
KEDA_SCHEMAS = {
    ("keda.sh/v1alpha1", "ScaledObject"): SCALED_OBJECT,
    ("keda.sh/v1alpha1", "TriggerAuthentication"): TRIGGER_AUTHENTICATION,
}


def validate(doc):
    schema = KEDA_SCHEMAS.get((doc["apiVersion"], doc["kind"]))
    if schema is not None:
        jsonschema.Draft202012Validator(schema).validate(doc)
    else:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_rendered_object_passes_its_schema(overlay):
    docs = render(overlay)
    kinds = {d["kind"] for d in docs}
    assert {
        "ConfigMap",
        "Deployment",
        "StatefulSet",
        "Service",
        "PodDisruptionBudget",
        "NetworkPolicy",
    } <= kinds
    if overlay in KEDA_OVERLAYS:
        assert {"ScaledObject", "TriggerAuthentication"} <= kinds
    else:  # no KEDA kinds: the overlay applies where KEDA is not installed
        assert not {d["apiVersion"] for d in docs if d["apiVersion"].startswith("keda.sh/")}
    for doc in docs:
        try:
            validate(doc)
        except (kubernetes_validate.ValidationError, jsonschema.ValidationError) as exc:
            where = "/".join(str(p) for p in exc.path)
            pytest.fail(f"{overlay}: {doc['kind']} {doc['metadata']['name']} at {where}: {exc.message}")


@pytest.mark.parametrize("overlay", KEDA_OVERLAYS)
def test_the_redis_streams_trigger_uses_only_the_scalers_parameters(overlay):
    (scaled,) = of_kind(render(overlay), "ScaledObject").values()
    for trigger in scaled["spec"]["triggers"]:
        params = set(trigger["metadata"])
        assert params <= REDIS_STREAMS_PARAMETERS, params - REDIS_STREAMS_PARAMETERS
        # One target; lag needs the group and a threshold KEDA's docs ask for with it.
        assert len(params & {"pendingEntriesCount", "streamLength", "lagCount"}) == 1
        assert {"consumerGroup", "activationLagCount"} <= params
        assert int(trigger["metadata"]["lagCount"]) >= 1


def test_the_validators_reject_what_a_cluster_would():
    """Neither check is vacuous: a misspelt field fails each."""
    docs = render("gpu-sglang")
    generator = of_kind(docs, "Deployment")["spex-generator"]
    with pytest.raises(kubernetes_validate.ValidationError):  # no native sidecars before 1.28
        kubernetes_validate.validate(generator, "1.27", strict=True)
    typo = copy.deepcopy(generator)
    typo["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGett"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(typo)
    (scaled,) = copy.deepcopy(of_kind(docs, "ScaledObject")).values()
    scaled["spec"]["maxReplicas"] = scaled["spec"].pop("maxReplicaCount")
    with pytest.raises(jsonschema.ValidationError):
        validate(scaled)
    (auth,) = copy.deepcopy(of_kind(docs, "TriggerAuthentication")).values()
    del auth["spec"]["secretTargetRef"][0]["key"]
    with pytest.raises(jsonschema.ValidationError):
        validate(auth)
