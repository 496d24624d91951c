"""`spex up` gives a service that waits on an engine SPEX_ENGINE_WAIT_S to start (a server loads
its model for minutes; an in-process generator measures its step curve, a minute or more on a
busy CPU), every other service the short START_WAIT_S; the message of one still waiting names
the setting and quotes the last line it logged. No processes: children with logs written by the test."""

import threading

import pytest

from spex.services import launcher
from spex.services.launcher import START_WAIT_S, _wait_healthy, start_limits
from spex.shared.runtime.settings import Settings
from spex.shared.runtime.supervisor import Supervisor, _Child

VLLM = {"SPEX_ENGINE": "vllm", "SPEX_ENGINE_URL": "http://10.0.0.7:8000"}


def supervised(tmp_path, *children):
    """A supervisor holding `children` (kind, name, env) without starting them, their logs empty."""
    supervisor = Supervisor(tmp_path)
    for kind, name, env in children:
        supervisor.children[name] = _Child(kind, name, env)
        supervisor.log_path(name).write_bytes(b"")
    return supervisor


def test_the_setting_defaults_to_minutes_and_refuses_nonsense():
    assert Settings().engine_wait_s >= 600  # a 7B model's load and graph capture, with room
    assert Settings.from_env({"SPEX_ENGINE_WAIT_S": "1800"}).engine_wait_s == 1800
    with pytest.raises(ValueError, match="SPEX_ENGINE_WAIT_S"):
        Settings.from_env({"SPEX_ENGINE_WAIT_S": "0"})


def test_only_a_service_waiting_on_a_server_gets_the_engine_wait(tmp_path):
    supervisor = supervised(
        tmp_path,
        ("generator", "gen-0", VLLM),
        ("generator", "gen-1", {"SPEX_ENGINE": "sim", "SPEX_ENGINE_URL": ""}),
        ("scorer", "scorer-0", {"SPEX_PRM": "/models/prm", "SPEX_PRM_URL": "http://10.0.0.8:8000"}),
        ("scorer", "scorer-1", {"SPEX_PRM": "", "SPEX_PRM_URL": ""}),
        ("scorer", "scorer-2", {"SPEX_PRM": "", "SPEX_PRM_URL": "http://10.0.0.9:8000"}),  # URL alone
        ("coordinator", "coord-0", VLLM),  # sees the engine's settings, waits on no server
        ("generator", "gen-2", {"SPEX_ENGINE": "hf", "SPEX_STARTUP_SWEEP": "True"}),  # measures its curve
        ("generator", "gen-3", {"SPEX_ENGINE": "hf", "SPEX_STARTUP_SWEEP": "False"}),
        ("generator", "gen-4", {"SPEX_ENGINE": "hf", "SPEX_PROFILE_FILE": "/curves/a100.json"}),
    )
    assert start_limits(supervisor, 900.0) == {
        "gen-0": START_WAIT_S + 900.0,
        "gen-1": START_WAIT_S,
        "scorer-0": START_WAIT_S + 900.0,
        "scorer-1": START_WAIT_S,
        "scorer-2": START_WAIT_S + 900.0,
        "coord-0": START_WAIT_S,
        "gen-2": START_WAIT_S + 900.0,
        "gen-3": START_WAIT_S,
        "gen-4": START_WAIT_S,
    }


def test_a_generator_may_start_after_the_short_wait_while_its_server_loads(tmp_path, monkeypatch):
    monkeypatch.setattr(launcher, "START_WAIT_S", 0.2)
    supervisor = supervised(tmp_path, ("generator", "gen-0", VLLM), ("ingress", "ingress-0", {}))
    supervisor.log_path("ingress-0").write_bytes(b'{"event": "service_started"}\n')
    # The generator starts at 0.6 s: past the short wait, within the engine's.
    late = threading.Timer(0.6, supervisor.log_path("gen-0").write_bytes, [b'{"event": "service_started"}\n'])
    late.start()
    try:
        _wait_healthy(supervisor, tmp_path, engine_wait_s=5.0)
    finally:
        late.cancel()


def test_a_generator_still_waiting_after_the_engine_wait_is_named_with_the_setting(tmp_path, monkeypatch):
    monkeypatch.setattr(launcher, "START_WAIT_S", 0.1)
    supervisor = supervised(tmp_path, ("generator", "gen-0", VLLM))
    with pytest.raises(ValueError) as failed:
        _wait_healthy(supervisor, tmp_path, engine_wait_s=0.3)
    message = str(failed.value)
    assert message.startswith("not started after 0 s: gen-0 (waiting for its engine at http://10.0.0.7:8000)")
    assert message.endswith("; SPEX_ENGINE_WAIT_S (0 s) is how long an engine may load")


def test_a_service_with_no_server_still_fails_after_the_short_wait(tmp_path, monkeypatch):
    monkeypatch.setattr(launcher, "START_WAIT_S", 0.1)
    supervisor = supervised(tmp_path, ("generator", "gen-0", VLLM), ("allocator", "allocator-0", {}))
    with pytest.raises(ValueError) as failed:
        _wait_healthy(supervisor, tmp_path, engine_wait_s=60.0)
    assert str(failed.value) == f"not started after 0 s: allocator-0 (their logs: {tmp_path})"


def test_a_service_still_waiting_is_reported_with_its_last_line(tmp_path, monkeypatch):
    monkeypatch.setattr(launcher, "START_WAIT_S", 0.1)
    hf = {"SPEX_ENGINE": "hf", "SPEX_STARTUP_SWEEP": "True"}
    supervisor = supervised(tmp_path, ("generator", "gen-0", hf))
    supervisor.log_path("gen-0").write_bytes(b'{"event": "step_curve_cell", "batch": 8}\n')
    with pytest.raises(ValueError) as failed:
        _wait_healthy(supervisor, tmp_path, engine_wait_s=0.2, kept=False)  # a scratch log dir
    message = str(failed.value)
    assert message.startswith(
        "not started after 0 s: gen-0 (waiting for its engine's step curve, measured at start)"
    )
    assert """gen-0's last line: {"event": "step_curve_cell", "batch": 8}""" in message
    assert str(tmp_path) not in message  # gone when the message is read
