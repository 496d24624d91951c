"""The first-question page shows what a real `spex up` prints and answers: its start-up lines
are the ones a run prints (ports and paths aside), and the observability guide's are the same
lines in the same order with the metrics line in its place; an answer names the simulated reward model
`sim-prm`, and the tree `spex tree` reads holds the answer's `nodes` plus the root and the
speculative steps the search never used, as the page says. Also: `spex up` refuses a data
directory others can read, in one line that names the chmod that fixes it."""

import collections
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spex.shared.runtime.redis_server import free_port
from tests.services.helpers import http, wait_http

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "getting-started" / "first-question.md").read_text(encoding="utf-8")
OBSERVABILITY = (ROOT / "docs" / "guides" / "observability.md").read_text(encoding="utf-8")
HOME_DATA = "~/.local/share/spex"


def flat(text: str) -> str:
    return " ".join(text.split())


def normalized(text: str, data_dir: str, port: int) -> str:
    """The start-up lines with what differs between runs put as the page writes it."""
    text = flat(text).replace(data_dir, HOME_DATA)
    text = re.sub(r"redis://127\.0\.0\.1:\d+/0", "redis://127.0.0.1:PORT/0", text)
    return text.replace(f"127.0.0.1:{port}", "127.0.0.1:8080")


def start_up_block(page: str) -> str:
    block = page.split("```\nspex up: ", 1)[1].split("```", 1)[0]
    return "spex up: " + block


def metrics_sample_holds(run: list[str]) -> None:
    """The observability guide's start-up sample (`--metrics-port 8700`) is the run's lines in
    their order, with the metrics line after the logs' and before the last: one port a service,
    from 8700 up, in the order the run names them."""
    sample = [
        normalized(line, HOME_DATA, 8080) for line in start_up_block(OBSERVABILITY).splitlines() if line
    ]
    metrics = [line for line in sample if line.startswith("metrics: ")]
    assert len(metrics) == 1, sample
    at = sample.index(metrics[0])
    assert sample[:at] + sample[at + 1 :] == run, f"the guide shows:\n{sample}\na run prints:\n{run}"
    assert run[at - 1].startswith("logs: ") and at == len(run) - 1, run
    services = run[0].rpartition("services: ")[2].split(", ")
    assert metrics[0] == "metrics: " + ", ".join(f"{name} :{8700 + i}" for i, name in enumerate(services))


@pytest.mark.redis
def test_the_first_question_page_shows_a_real_run(tmp_path):
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    port = free_port()
    env = {**os.environ, "COLUMNS": "400", "SPEX_METRICS_PORT": "0"}
    up = subprocess.Popen(
        [sys.executable, "-m", "spex.cli", "up", "--data-dir", str(data), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    printed = []
    try:
        assert up.stdout is not None
        for line in up.stdout:
            printed.append(line)
            if line.startswith("running;") or len(printed) > 40:
                break
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/health")
        status, queued = http(
            "POST",
            f"{base}/v1/questions",
            {"question": "What is 12 * 13?", "algorithm": "rebase", "target": 16, "reference_answer": "156"},
        )
        assert status == 202, queued
        deadline = time.monotonic() + 60
        while (answer := http("GET", f"{base}/v1/questions/{queued['query_id']}"))[0] == 202:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        tree = http("GET", f"{base}/v1/questions/{queued['query_id']}/tree")[1]
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(timeout=60)
    said = normalized(start_up_block(PAGE), HOME_DATA, 8080)
    ran = normalized("".join(printed), str(data), port)
    assert said == ran, f"the page shows:\n{said}\na run prints:\n{ran}"
    metrics_sample_holds([normalized(line, str(data), port) for line in printed if line.strip()])
    body = answer[1]
    assert body["status"] == "answered" and body["served_by"]["reward"] == "sim-prm"
    states = collections.Counter(node["state"] for node in tree["nodes"])
    assert states["root"] == 1 and states["primary"] + states["adopted"] == body["nodes"], states
    beside = states["cancelled"] + states["unused"] + states["speculative"]  # speculation never used
    assert len(tree["nodes"]) == body["nodes"] + 1 + beside
    assert body["speculative_issued"] >= states["adopted"] + beside  # jobs: a node may be issued twice
    page = flat(PAGE)
    assert "The nodes whose state is `primary` or `adopted` are the search's tree, `nodes` of them" in page
    for state in ("root", "cancelled", "unused", "speculative"):
        assert f"`{state}`" in page.split("## Watch it", 1)[1], state


def test_a_data_directory_others_can_read_is_refused_with_the_fix(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    done = subprocess.run(
        [sys.executable, "-m", "spex.cli", "up", "--data-dir", str(shared), "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"spex: error: --data-dir: {shared} is open to others (mode 755; it holds the Redis password): "
        f"run `chmod 700 {shared}`"
    ]
