"""`spex up` SIGKILLed with questions in flight: within seconds nothing of it runs (services,
embedded Redis), the data dir is free, and `spex up` on it again answers every question. Two
`spex up` on one data dir: the second refuses, in one line. Real processes, real HTTP."""

import signal
import subprocess
import sys
import time
from pathlib import Path

from spex.shared.runtime.redis_server import free_port
from tests.services.helpers import http


def descendants(pid):
    """Every process under `pid` (from /proc's children lists)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def spex_up(data, port, log):
    argv = [sys.executable, "-m", "spex.cli", "up", "--data-dir", str(data), "--port", str(port)]
    return subprocess.Popen([*argv, "--time-scale", "0.05"], stdout=log, stderr=subprocess.STDOUT)


def wait_listening(port, proc, timeout_s=90):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "spex up exited"
        try:
            http("GET", f"http://127.0.0.1:{port}/v1/questions/none")
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError("the ingress never listened")


def test_a_killed_spex_up_leaves_nothing_running_and_a_restart_answers_every_question(tmp_path):
    data, port = tmp_path / "data", free_port()
    base = f"http://127.0.0.1:{port}/v1/questions"
    with open(tmp_path / "up1.log", "wb") as log:
        first = spex_up(data, port, log)
        try:
            wait_listening(port, first)
            # A second `spex up` on the same data dir: one line naming the flag and the holder.
            # (Before the questions: its start takes seconds, long enough to answer them.)
            argv = ["up", "--data-dir", str(data), "--port", str(free_port())]
            second = subprocess.run(
                [sys.executable, "-m", "spex.cli", *argv], capture_output=True, text=True, timeout=60
            )
            assert second.returncode == 2, second.stderr
            assert second.stderr.strip() == (
                f"spex: error: --data-dir: {data} is in use by another `spex up` (pid {first.pid}); "
                "stop it, or give another"
            )
            qids = [
                http("POST", base, {"question": f"{n}+{n}?", "algorithm": "rebase", "target": 8})[1][
                    "query_id"
                ]
                for n in range(3)
            ]
            children = descendants(first.pid)
            assert len(children) >= 6  # five services and the embedded Redis
            assert http("GET", f"{base}/{qids[-1]}")[0] == 202  # still searching
            first.send_signal(signal.SIGKILL)
            first.wait()
            deadline = time.monotonic() + 15
            while any(alive(p) for p in children) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not [p for p in children if alive(p)], "a child of the killed spex up still runs"
        finally:
            if first.poll() is None:
                first.kill()
    with open(tmp_path / "up2.log", "wb") as log:
        again = spex_up(data, port, log)  # the same data dir and port: both free
        try:
            wait_listening(port, again)
            deadline, answers = time.monotonic() + 120, {}
            while len(answers) < len(qids) and time.monotonic() < deadline:
                for q in qids:
                    status, body = http("GET", f"{base}/{q}")
                    if status == 200:
                        answers[q] = body
                time.sleep(0.3)
        finally:
            again.send_signal(signal.SIGINT)
            again.wait(timeout=30)
    assert set(answers) == set(qids), (tmp_path / "up2.log").read_text()[-2000:]
    assert all(a["status"] == "answered" for a in answers.values())
    assert again.returncode == 0
