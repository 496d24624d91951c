"""FaultProxy against a real Redis server: pass, partition, blackhole, latency, stop."""

import socket
import threading
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from spex.bench.chaos.proxy import FaultProxy
from spex.shared.runtime.redis_server import RedisServer


@pytest.fixture(scope="module")
def server():
    with RedisServer() as srv:
        yield srv


@pytest.fixture
def proxy(server):
    with FaultProxy("127.0.0.1", server.port) as p:
        yield p


def client(url: str, **kwargs) -> redis.Redis:
    """A client that never retries, so each fault shows as one exception."""
    return redis.Redis.from_url(url, retry=Retry(NoBackoff(), 0), **kwargs)


def test_pass_mode_forwards_commands(proxy, server):
    assert proxy.mode == "pass"
    assert proxy.url() == f"redis://127.0.0.1:{proxy.port}/0"
    r = client(proxy.url())
    assert r.set("pass:k", "v") is True
    assert r.get("pass:k") == b"v"
    assert client(server.url).get("pass:k") == b"v"  # really reached the server
    assert proxy.connections == 1
    r.close()


def test_partition_fails_fast_and_heal_reconnects(proxy):
    r = client(proxy.url())
    r.set("part:k", "v")
    proxy.partition()
    assert proxy.mode == "partition"
    assert proxy.connections == 0
    t0 = time.monotonic()
    with pytest.raises(redis.exceptions.ConnectionError):
        r.get("part:k")
    with pytest.raises(redis.exceptions.ConnectionError):
        client(proxy.url()).ping()  # a new connection is cut too
    assert time.monotonic() - t0 < 1.0
    proxy.heal()
    assert proxy.mode == "pass"
    assert r.get("part:k") == b"v"


def test_blackhole_times_out_and_heal_restores(proxy):
    r = client(proxy.url(), socket_timeout=0.3)
    idle = client(proxy.url())
    r.set("bh:k", "v")
    idle.ping()
    proxy.blackhole()
    assert proxy.mode == "blackhole"
    t0 = time.monotonic()
    with pytest.raises(redis.exceptions.TimeoutError):
        r.get("bh:k")
    assert 0.25 < time.monotonic() - t0 < 1.0
    with pytest.raises(redis.exceptions.TimeoutError):
        client(proxy.url(), socket_timeout=0.3).ping()  # new connections hang as well
    proxy.heal()
    assert r.get("bh:k") == b"v"
    assert idle.get("bh:k") == b"v"  # a client idle through the blackhole reconnects cleanly


def test_latency_delays_each_chunk(proxy):
    r = client(proxy.url())
    r.ping()
    proxy.set_latency(0.2)
    t0 = time.monotonic()
    assert r.ping() is True
    assert 0.2 <= time.monotonic() - t0 < 1.5
    proxy.set_latency(0)
    t0 = time.monotonic()
    assert r.ping() is True
    assert time.monotonic() - t0 < 0.1


def test_partition_cuts_a_blocking_xread(proxy, server):
    r = client(proxy.url())
    r.delete("chaos:stream")
    errors: list[BaseException] = []

    def read() -> None:
        try:
            r.xread({"chaos:stream": "$"}, block=10_000)
        except redis.exceptions.RedisError as exc:
            errors.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    direct = client(server.url)
    deadline = time.monotonic() + 1.0
    while not any(c["cmd"] == "xread" for c in direct.client_list()):  # the XREAD is blocked in Redis
        assert time.monotonic() < deadline, "XREAD never reached the server"
        time.sleep(0.01)
    proxy.partition()
    reader.join(1.0)
    assert not reader.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], redis.exceptions.ConnectionError)


def test_stop_is_idempotent_and_frees_the_port(server):
    p = FaultProxy("127.0.0.1", server.port).start()
    port = p.port
    r = client(p.url())
    r.ping()
    p.stop()
    p.stop()
    assert not any(t.name == "fault-proxy" and t.is_alive() for t in threading.enumerate())
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
        pass
    with pytest.raises(redis.exceptions.ConnectionError):
        r.ping()
    with FaultProxy("127.0.0.1", server.port, port=port) as again:  # the same port binds again
        assert again.port == port
        assert client(again.url()).ping() is True
    with pytest.raises(RuntimeError):
        p.partition()
