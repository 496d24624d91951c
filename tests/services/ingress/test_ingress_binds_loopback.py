"""The HTTP ingress listens on loopback only unless told otherwise. A real ingress process."""

import asyncio

import pytest

from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster
from tests.services.helpers import wait_http


def test_the_ingress_binds_loopback_unless_told_otherwise(redis_url):
    import socket

    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))  # no packet is sent: this only picks a route
            outside = probe.getsockname()[0]
        except OSError:
            outside = "127.0.0.1"
    if outside.startswith("127."):
        pytest.skip("this machine has no non-loopback IPv4 address to test from")

    async def go():
        cluster = Cluster(redis_url, "processes", http_port=port)
        await cluster.start("ingress", "ingress-0")
        try:
            await asyncio.to_thread(wait_http, f"http://127.0.0.1:{port}/v1/questions/x")
            try:
                socket.create_connection((outside, port), timeout=1).close()
                return True
            except OSError:
                return False
        finally:
            await cluster.stop()

    assert asyncio.run(go()) is False
