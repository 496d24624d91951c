"""`spex up` that cannot start says why in one line, at once, and exits 2: a Redis it cannot
reach, an ingress port in use. Real processes."""

import socket
import subprocess
import sys
import time

from spex.shared.runtime.redis_server import free_port


def spex_up(*args, timeout_s=90):
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "spex.cli", "up", *args], capture_output=True, text=True, timeout=timeout_s
    )
    return done, time.monotonic() - started


def test_an_unreachable_redis_is_one_line_naming_the_flag_and_the_address():
    done, took = spex_up("--redis", "redis://127.0.0.1:1/0", "--port", str(free_port()))
    assert done.returncode == 2 and took < 30
    assert done.stderr.strip().splitlines() == [
        "spex: error: --redis: cannot reach redis://127.0.0.1:1/0: Error 111 connecting to 127.0.0.1:1. "
        "Connection refused."
    ]


def test_a_password_in_an_unreachable_redis_url_is_not_printed():
    done, _ = spex_up("--redis", "redis://:hunter2@127.0.0.1:1/0", "--port", str(free_port()))
    assert done.returncode == 2 and "hunter2" not in done.stdout + done.stderr


def test_an_ingress_port_in_use_is_one_line_naming_the_flag_and_the_port_before_anything_starts(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done, _ = spex_up("--port", str(port), "--data-dir", str(tmp_path / "data"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"spex: error: --port: cannot listen on 127.0.0.1:{port} (Address already in use): give a free port"
    ]


def test_a_generator_still_waiting_is_named_with_the_engine_it_waits_for(tmp_path):
    from spex.services.launcher import _waits_on
    from spex.shared.runtime.supervisor import Supervisor, _Child

    supervisor = Supervisor(tmp_path)
    env = {"SPEX_ENGINE": "vllm", "SPEX_ENGINE_URL": "http://10.0.0.7:8000"}
    supervisor.children["gen-0"] = _Child("generator", "gen-0", env)
    supervisor.children["scorer-0"] = _Child("scorer", "scorer-0", env)
    assert _waits_on(supervisor, "gen-0") == "gen-0 (waiting for its engine at http://10.0.0.7:8000)"
    assert _waits_on(supervisor, "scorer-0") == "scorer-0"
