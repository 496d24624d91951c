"""The Kubernetes overlay for a Redis/Valkey Cluster (issue #23), rendered and checked against
the code: the cluster replaces the single Redis, the services run in cluster mode with the
partitions the triggers name, and coordinators scale on a metric the code exports."""

import re

from spex.proto import names
from spex.proto.names import DEFAULT_POOL, GENERATOR_GROUP, gen_jobs
from spex.shared.runtime import metrics
from spex.shared.runtime.settings import Settings
from tests.deploy.manifests import SERVICES, argv, of_kind, render


def test_the_cluster_replaces_the_single_redis():
    docs = render("cluster")
    sets = of_kind(docs, "StatefulSet")
    assert "redis" not in sets and "redis" not in of_kind(docs, "Service")
    nodes = sets["redis-cluster"]
    assert nodes["spec"]["replicas"] == 6
    (container,) = nodes["spec"]["template"]["spec"]["containers"]
    args = " ".join(argv(container))
    assert "--cluster-enabled yes" in args and "--cluster-config-file /data/nodes.conf" in args
    assert "--appendonly yes" in args and "--include /etc/spex-redis/redis.conf" in args
    assert {"name": "data", "mountPath": "/data"} in container["volumeMounts"]  # nodes.conf survives
    (init,) = of_kind(docs, "Job")["redis-cluster-init"]["spec"]["template"]["spec"]["containers"]
    script = " ".join(argv(init))
    assert "--cluster create" in script and "--cluster-replicas 1" in script
    assert "for i in 0 1 2 3 4 5" in script  # every node of the StatefulSet
    deployments = of_kind(docs, "Deployment").values()
    assert {d["spec"]["template"]["spec"]["containers"][0]["name"] for d in deployments} == SERVICES


def test_the_services_run_in_cluster_mode_with_partitions():
    config = of_kind(render("cluster"), "ConfigMap")["spex-env"]["data"]
    settings = Settings.from_env(config)  # every value valid as the services read it
    assert settings.redis_cluster and settings.partitions >= 2
    assert settings.redis_url.startswith("redis://redis-cluster.")


def test_generators_scale_on_every_part_of_the_shared_job_stream():
    docs = render("cluster")
    partitions = Settings.from_env(of_kind(docs, "ConfigMap")["spex-env"]["data"]).partitions
    scaled = of_kind(docs, "ScaledObject")["spex-generator"]
    triggers = scaled["spec"]["triggers"]
    parts = names.Partitions(partitions).spread(gen_jobs(DEFAULT_POOL))
    assert [t["metadata"]["stream"] for t in triggers] == parts
    for t in triggers:
        assert t["type"] == "redis-cluster-streams" and t["metricType"] == "Value"
        assert t["metadata"]["consumerGroup"] == GENERATOR_GROUP
        assert t["metadata"]["addresses"].startswith("redis-cluster.")
        assert t["authenticationRef"]["name"] in of_kind(docs, "TriggerAuthentication")


def test_coordinators_scale_on_how_long_results_wait_for_them():
    docs = render("cluster")
    scaled = of_kind(docs, "ScaledObject")["spex-coordinator"]
    assert scaled["spec"]["scaleTargetRef"]["name"] in of_kind(docs, "Deployment")
    assert scaled["spec"]["minReplicaCount"] >= 2
    (trigger,) = scaled["spec"]["triggers"]
    query = trigger["metadata"]["query"]
    (metric,) = re.findall(r"(spex_\w+)_bucket", query)
    assert metric == metrics.BUS_HOP._name  # the histogram the coordinator exports
    assert 'service="coordinator"' in query
