"""An operator's plain mistake with `spex up`, `submit` or `result` is one line naming the flag
and its fix, before anything starts: no traceback, no Redis, no service, no log directory."""

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from spex.cli.main import main
from spex.services import launcher
from spex.shared.runtime.redis_server import free_port


def spex(*args):
    return subprocess.run(
        [sys.executable, "-m", "spex.cli", *args], capture_output=True, text=True, timeout=120
    )


MISTAKES = {  # the arguments after `up`'s (a data directory, a free port, no metrics) -> the error
    "up --model {tmp}/model.gguf": "--model: {tmp}/model.gguf is a GGUF file: import it once with `spex",
    "up --model {tmp}/none": "--model: {tmp}/none: no such directory",
    "up --model {tmp}/empty": "--model: {tmp}/empty holds no config.json",
    "up --redis 127.0.0.1:6399": "--redis: give a URL, redis://HOST:PORT (or rediss://, unix://)",
    "up --redis redis://me:secret@127.0.0.1:6399": "--redis: no password in the URL",
    "up --redis-password-file {tmp}/none": "--redis-password-file: {tmp}/none: No such file",
    "up --port {busy}": "--port: cannot listen on 127.0.0.1:{busy}",
    "up --metrics-port {busy}": "--metrics-port: cannot listen on 127.0.0.1:{busy}",
    "up --metrics-port 65534": "--metrics-port: its ports 65534-65538 (one per service) run past 65535",
    "up --data-dir {tmp}/a-file": "--data-dir: {tmp}/a-file is a file",
    "up --engine-url http://127.0.0.1:8000": "--engine-url: a vllm or sglang server's; give --engine vllm",
    "up --engine vllm --engine-url http://a:1,http://b:1 --generators 3": "--generators: ",
    "up --reward logprob": "--reward / SPEX_REWARD (reward): invalid value 'logprob'",
    "submit 2+2? --url {nowhere} --baseline-twin --mode baseline": "--baseline-twin: a twin checks",
    "submit 2+2? --redis 127.0.0.1:6399": "--redis: give a URL, redis://HOST:PORT (or rediss://, unix://)",
    "result q --redis 127.0.0.1:6399": "--redis: give a URL, redis://HOST:PORT (or rediss://, unix://)",
    "submit 2+2? --redis redis://127.0.0.1:1 --redis-password-file {tmp}/none": "--redis-password-file: ",
    "submit 2+2?": "--url / --redis: give one",
    "submit 2+2? --url 127.0.0.1:8080": "--url: give the ingress's URL, http://HOST:PORT",
    "submit 2+2? --url {nowhere} --redis-password-file {tmp}/a-file": "--redis-password-file: goes with",
    "submit 2+2? --url {nowhere} --wait -1": "--wait: seconds, from 0",
    "submit 2+2? --url {nowhere} --target 0": "--target: must be at least 1",  # before --url is asked
    "submit 2+2? --url {nowhere} --early-stop-alpha 0": "--early-stop-alpha: must be above 0",
    "submit --url {nowhere} --file {tmp}/none.jsonl": "--file: ",
    "tree q --url {nowhere} --token-file {tmp}/none": "--token-file: {tmp}/none: No such file",
}


@pytest.fixture
def where(tmp_path):
    """The files and ports the mistakes name."""
    (tmp_path / "model.gguf").write_bytes(b"GGUF\x03\x00\x00\x00")
    (tmp_path / "empty").mkdir()
    (tmp_path / "a-file").write_text("")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield {
            "tmp": str(tmp_path),
            "busy": taken.getsockname()[1],
            "nowhere": f"http://127.0.0.1:{free_port()}",
        }


@pytest.mark.parametrize("mistake", MISTAKES)
def test_a_mistake_is_one_line_naming_the_flag_before_anything_starts(mistake, where, monkeypatch, capsys):
    def started(*args, **kwargs):
        raise AssertionError("spex up started its services")

    monkeypatch.setattr(launcher, "serve_forever", started)
    argv = mistake.format(**where).split()
    if argv[0] == "up":
        data = Path(where["tmp"], "data")
        argv[1:1] = ["--data-dir", str(data), "--port", str(free_port()), "--metrics-port", "0"]
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse's own refusals
        status = exc.code
    err = capsys.readouterr().err
    assert status == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"spex: error: {MISTAKES[mistake].format(**where)}")


def test_the_command_line_says_it_in_one_line_and_fast(tmp_path):
    """The same through the installed entry point: one line, no traceback, nothing started."""
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF\x03\x00\x00\x00")
    data = tmp_path / "data"
    up = spex("up", "--model", str(gguf), "--data-dir", str(data), "--port", str(free_port()))
    submit = spex("submit", "2+2?", "--redis", "127.0.0.1:6399")
    for out in (up, submit):
        assert out.returncode == 2 and len(out.stderr.splitlines()) == 1 and "Traceback" not in out.stderr
    assert up.stderr.startswith(f"spex: error: --model: {gguf} is a GGUF file")
    assert submit.stderr.startswith("spex: error: --redis: give a URL, redis://HOST:PORT")
    assert not data.exists()  # nothing started: not even the data directory made
