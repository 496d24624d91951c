"""In every overlay and compose profile the coordinators know whether the scorer has a reward
model: a coordinator rewards real content by the PRM only when its own SPEX_PRM is set
(services/coordinator/query.py), so a scorer's reward model that the coordinators do not know of
is never asked, and steps are rewarded by the generator's log-probabilities instead."""

import pytest

from tests.deploy.manifests import COMPOSE, OVERLAYS, compose, compose_env, effective_env, of_kind, render


def prm_of(docs, deployment):
    (c,) = of_kind(docs, "Deployment")[deployment]["spec"]["template"]["spec"]["containers"]
    return effective_env(c, of_kind(docs, "ConfigMap")).get("SPEX_PRM", "")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_coordinators_know_the_scorers_reward_model(overlay):
    docs = render(overlay)
    assert prm_of(docs, "spex-coordinator") == prm_of(docs, "spex-scorer")


def test_compose_coordinators_know_the_reward_model_the_vllm_profile_scores_with():
    services = compose()["services"]
    scorer = compose_env(services["scorer-vllm"])["SPEX_PRM"]
    # The profile's command line sets SPEX_PRM for every service (compose/docker-compose.yml's header).
    header = COMPOSE.read_text().split("services:")[0]
    assert f"SPEX_PRM={scorer}" in header and "--profile vllm" in header
    assert services["coordinator"]["environment"]["SPEX_PRM"] == "${SPEX_PRM:-}"
