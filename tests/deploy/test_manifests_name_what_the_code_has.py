"""Everything the rendered manifests name exists: settings in the ENV registry (and the values a
service would accept), `spex` CLI commands, the ports probes and policies point at, the pods
selectors pick; and the Redis password is never on a command line."""

import contextlib
import io
import re

import pytest

from spex.cli.main import build_parser
from spex.shared.roofline.hardware import parse_profile
from spex.shared.runtime.settings import Settings
from tests.deploy.manifests import (
    KNOWN_SETTINGS,
    OVERLAYS,
    SPEX_IMAGES,
    argv,
    compose,
    compose_env,
    containers,
    effective_env,
    is_spex,
    of_kind,
    pod_templates,
    render,
)


def spex_command_problem(args):
    """Why `spex ARGS` would not parse, or None (argparse exits on an error: catch it)."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            build_parser().parse_args(args)
    except SystemExit:
        return err.getvalue().strip() or f"spex {' '.join(args)}: exits"
    return None


def test_the_cli_check_rejects_what_spex_rejects():
    assert spex_command_problem(["worker", "generator"]) is None
    assert "invalid choice" in spex_command_problem(["worker", "genrator"])
    assert spex_command_problem(["serve"]) is not None


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_setting_is_registered_and_accepted(overlay):
    docs = render(overlay)
    configmaps = of_kind(docs, "ConfigMap")
    data = set(configmaps["spex-env"]["data"])
    assert data <= KNOWN_SETTINGS, data - KNOWN_SETTINGS
    for workload, template in pod_templates(docs):
        for c in containers(template["spec"]):
            names = {e["name"] for e in c.get("env", [])}
            if not is_spex(c):  # a third-party server: no SPEX_* variable means anything to it
                assert not {n for n in names if n.startswith("SPEX_")}, c["name"]
                continue
            env = effective_env(c, configmaps)
            assert set(env) <= KNOWN_SETTINGS, (workload["metadata"]["name"], set(env) - KNOWN_SETTINGS)
            settings = Settings.from_env(env)  # raises, naming the variable, on a bad value
            parse_profile(settings.profile)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_spex_container_runs_a_real_cli_command(overlay):
    seen = set()
    for workload, template in pod_templates(render(overlay)):
        for c in containers(template["spec"]):
            if is_spex(c):
                assert spex_command_problem(c["args"]) is None, (workload["metadata"]["name"], c["args"])
                seen.add(tuple(c["args"]))
    assert len(seen) == 5


def test_every_compose_service_on_the_spex_image_runs_a_real_cli_command():
    for name, svc in compose()["services"].items():
        if str(svc.get("image", "")).split(":")[0] in SPEX_IMAGES:
            assert spex_command_problem(svc["command"]) is None, name
            assert set(compose_env(svc)) <= KNOWN_SETTINGS, name
            parse_profile(Settings.from_env(compose_env(svc)).profile)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_point_at_ports_the_container_has(overlay):
    docs = render(overlay)
    configmaps = of_kind(docs, "ConfigMap")
    for _, template in pod_templates(docs):
        for c in containers(template["spec"]):
            names = {p["name"] for p in c.get("ports", []) if "name" in p}
            numbers = {p["containerPort"] for p in c.get("ports", [])}
            for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
                probe = c.get(kind)
                if probe is None:
                    continue
                # One handler: a patch that adds one to the base's probe leaves two, which the
                # API server refuses.
                assert len(set(probe) & {"httpGet", "tcpSocket", "grpc", "exec"}) == 1, (c["name"], kind)
                for action in ("httpGet", "tcpSocket", "grpc"):
                    if action in probe:
                        port = probe[action]["port"]
                        assert port in (names if isinstance(port, str) else numbers), (c["name"], kind, port)
                if "exec" not in probe:
                    continue
                command = " ".join(probe["exec"]["command"])
                if "os.environ" in command:  # a server elsewhere, at the URL the worker is given
                    (var,) = re.findall(r"os\.environ\['(\w+)'\]", command)
                    assert var in effective_env(c, configmaps) and command.endswith("'/health', timeout=5)")
                    continue
                (url,) = re.findall(r"http://127\.0\.0\.1:(\d+)/health", command)  # a loopback-only server
                args = argv(c)
                assert args[args.index("--port") + 1] == url, (c["name"], kind)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_redis_password_is_never_on_a_command_line(overlay):
    docs = render(overlay)
    for _, template in pod_templates(docs):
        for c in containers(template["spec"]):
            line = " ".join(argv(c))
            assert not re.search(r"requirepass|--pass|(^|\s)-a\s|REDISCLI_AUTH", line), (c["name"], line)
            for e in c.get("env", []):
                assert e["name"] != "SPEX_REDIS_PASSWORD", c["name"]  # a file, not an env value
                assert "secretKeyRef" not in e.get("valueFrom", {}), c["name"]
    for d in of_kind(docs, "ConfigMap").values():
        assert not {k for k in d.get("data", {}) if "PASSWORD" in k} - {"SPEX_REDIS_PASSWORD_FILE"}


def _matches(selector, template):
    labels = template["metadata"].get("labels", {})
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_selector_picks_some_pods(overlay):
    docs = render(overlay)
    templates = [t for _, t in pod_templates(docs)]
    selectors = []
    for d in of_kind(docs, "PodDisruptionBudget").values():
        selectors.append((d, d["spec"]["selector"]["matchLabels"]))
    for d in of_kind(docs, "Service").values():
        selectors.append((d, d["spec"]["selector"]))
    for d in of_kind(docs, "NetworkPolicy").values():
        selectors.append((d, d["spec"]["podSelector"]["matchLabels"]))
        for rule in d["spec"].get("ingress", []):
            for peer in rule.get("from", []):
                if "podSelector" in peer and "namespaceSelector" not in peer:  # this namespace's pods
                    selectors.append((d, peer["podSelector"]["matchLabels"]))
    for d, selector in selectors:
        assert selector, f"{d['kind']} {d['metadata']['name']}: an empty selector picks every pod"
        assert any(_matches(selector, t) for t in templates), (d["kind"], d["metadata"]["name"], selector)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_services_and_policies_name_ports_the_pods_have(overlay):
    docs = render(overlay)
    templates = [t for _, t in pod_templates(docs)]

    def port_names(selector):
        picked = [t for t in templates if _matches(selector, t)]
        return {
            p["name"]
            for t in picked
            for c in containers(t["spec"])
            for p in c.get("ports", [])
            if "name" in p
        }

    for d in of_kind(docs, "Service").values():
        for p in d["spec"]["ports"]:
            assert p["targetPort"] in port_names(d["spec"]["selector"]), (d["metadata"]["name"], p)
    for d in of_kind(docs, "NetworkPolicy").values():
        for rule in d["spec"].get("ingress", []):
            for p in rule.get("ports", []):
                assert p["port"] in port_names(d["spec"]["podSelector"]["matchLabels"]), (
                    d["metadata"]["name"],
                    p,
                )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_ingress_to_spex_pods_is_denied_unless_allowed(overlay):
    policies = of_kind(render(overlay), "NetworkPolicy")
    deny = policies["spex-default-deny"]["spec"]
    assert deny["podSelector"]["matchLabels"] == {"app": "spex"}
    assert deny["policyTypes"] == ["Ingress"] and not deny.get("ingress")
    (redis_rule,) = policies["spex-redis"]["spec"]["ingress"]
    assert {"podSelector": {"matchLabels": {"app": "spex"}}} in redis_rule["from"]
    (http_rule,) = policies["spex-ingress-http"]["spec"]["ingress"]
    assert "from" not in http_rule and http_rule["ports"] == [{"port": "http"}]  # from anywhere
    (metrics_rule,) = policies["spex-metrics"]["spec"]["ingress"]
    (peer,) = metrics_rule["from"]
    assert peer["namespaceSelector"]["matchLabels"] == {"spex-metrics": "scrape"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_disruption_budgets_keep_a_coordinator_and_take_one_generator_at_a_time(overlay):
    budgets = of_kind(render(overlay), "PodDisruptionBudget")
    assert budgets["spex-coordinator"]["spec"]["minAvailable"] == 1
    assert budgets["spex-generator"]["spec"]["maxUnavailable"] == 1
    assert "redis" in budgets
