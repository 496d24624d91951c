"""The Grafana dashboard reads what the code records: every metric a panel's query names is
one the services register (with the labels it groups and filters by), every metric they
register is on a panel, and compose and Kubernetes ship that one file."""

import json
import re

from prometheus_client.metrics import MetricWrapperBase

from spex.shared.runtime import metrics
from tests.deploy.manifests import ROOT, compose, render, yaml

DASHBOARD = ROOT / "k8s" / "base" / "grafana" / "spex-dashboard.json"
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
SELECTOR = re.compile(r"(spex_[a-z_]+)(?:\{([^}]*)\})?")


def registered() -> dict[str, tuple[str, set[str]]]:
    """Each series name the metrics module can expose -> (its family, its label names)."""
    out = {}
    for name in metrics.__all__:
        metric = getattr(metrics, name)
        if not isinstance(metric, MetricWrapperBase):
            continue
        labels = set(metric._labelnames) | ({"le"} if metric._type == "histogram" else set())
        for suffix in SUFFIXES[metric._type]:
            out[metric._name + suffix] = (metric._name, labels)
    return out


def queries():
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            yield panel["title"], target["expr"]


def test_every_query_names_registered_metrics_and_labels():
    series = registered()
    for title, expr in queries():
        names = SELECTOR.findall(expr)
        assert names, f"{title}: names no SPEX metric"
        for name, matchers in names:
            assert name in series, f"{title}: {name} is not a metric the code registers"
            labels = series[name][1]
            for matcher in filter(None, (m.strip() for m in matchers.split(","))):
                assert matcher.split("=")[0].strip("!~ ") in labels, f"{title}: {name} has no label {matcher}"
        for group in re.findall(r"by \(([^)]*)\)", expr):
            used = {label.strip() for label in group.split(",")}
            assert any(used <= series[n][1] for n, _ in names), f"{title}: no metric has labels {used}"


def test_every_registered_metric_is_on_the_dashboard():
    shown = {series_name for _, expr in queries() for series_name, _ in SELECTOR.findall(expr)}
    families = {family for name, (family, _) in registered().items() if name in shown}
    assert families == {family for family, _ in registered().values()}


def test_no_created_series_and_histograms_are_exposed():
    from prometheus_client import generate_latest

    metrics.QUERY_LATENCY.labels("rebase", "spex").observe(1.0)
    text = generate_latest().decode()
    assert "spex_query_latency_seconds_bucket" in text and "_created" not in text


def test_compose_mounts_the_dashboard_and_scrapes_every_service():
    grafana = compose()["services"]["grafana"]
    mounted = [v.split(":")[0] for v in grafana["volumes"] if v.endswith("spex-dashboard.json:ro")]
    assert mounted and (ROOT / "compose" / mounted[0]).resolve() == DASHBOARD.resolve()
    prometheus = yaml.safe_load((ROOT / "compose" / "prometheus.yml").read_text())
    assert prometheus["scrape_configs"][0]["dns_sd_configs"][0]["port"] == 8700


def test_kubernetes_ships_the_dashboard_as_a_configmap():
    maps = [d for d in render("sim") if d["metadata"]["name"] == "spex-grafana-dashboard"]
    assert len(maps) == 1 and maps[0]["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(maps[0]["data"]["spex-dashboard.json"]) == json.loads(DASHBOARD.read_text())
