"""A newcomer's first hour: `--version`, defaults in `--help`, results files that say how they
were made, errors that name the flag, and `spex result` and `spex top` against a live cluster."""

import asyncio
import json
import re
import subprocess
import sys
from importlib.metadata import version

from spex.shared.runtime.redis_server import free_port
from spex.shared.runtime.supervisor import Supervisor
from tests.services.cluster import Cluster
from tests.services.helpers import http, wait_http


def spex(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "spex.cli", *args], capture_output=True, text=True, timeout=300, env=env
    )


def test_version_and_help_show_defaults():
    out = spex("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"spex {version('spex')}"
    helps = spex("bench", "--help").stdout
    assert re.search(r"--tpot-target.*\(default: 0\.05\)", helps.replace("\n", " "))
    assert "(default: None)" not in helps and "(default: False)" not in helps
    up_help = " ".join(spex("up", "--help").stdout.split())
    assert "(default: $SPEX_METRICS_PORT, else 0)" in up_help  # the setting's own default


def test_a_results_file_records_its_command_line_version_and_settings(tmp_path):
    out = tmp_path / "r.json"
    args = ["bench", "--questions", "2", "--target", "4", "--tpot-target", "0.2", "--json", str(out)]
    args.append("--quiet")
    assert spex(*args).returncode == 0
    run = json.loads(out.read_text())["run"]
    assert run["command"] == ["spex", *args] and run["version"] == version("spex")
    assert run["settings"]["tpot_target"] == 0.2 and "scheduling" in run["settings"]


def test_up_names_the_flag_beside_the_variable():
    out = spex("up", "--engine", "vllm")
    assert out.returncode == 2 and out.stderr.startswith("spex: error: --engine-url / SPEX_ENGINE_URL")
    assert "Traceback" not in out.stderr


def test_a_crash_looping_service_shows_its_last_log_line(tmp_path):
    said = []
    supervisor = Supervisor(tmp_path, say=said.append)
    supervisor.add("bogus", "svc-0", {"SPEX_ENGINE": "nope", "PATH": "/usr/bin:/bin"})
    try:
        asyncio.run(asyncio.sleep(0))
        deadline = 200
        while not any("exited" in s for s in said) and deadline:
            supervisor.poll()
            deadline -= 1
            asyncio.run(asyncio.sleep(0.05))
    finally:
        supervisor.stop()
    note = next(s for s in said if "exited" in s)
    assert "its log says why:" in note and note.split("its log says why:")[1].strip()


def test_result_and_top_against_a_live_cluster(redis_url, tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"

    async def go():
        cluster = Cluster(redis_url, "processes", http_port=port)
        await cluster.start("ingress", "ingress-0")
        await cluster.start_all()
        await asyncio.to_thread(wait_http, f"{base}/health")
        try:
            qid = await cluster.client.submit("What is 5 + 6?", algorithm="rstar", target=4)
            await cluster.client.result(qid, timeout_s=30)
            slow = await cluster.client.submit("What is 7 + 8?", algorithm="rebase", target=64)
            await cluster.client.cancel(slow)
            await cluster.client.result(slow, timeout_s=30)
            tree = tmp_path / "tree.json"
            common = ["--redis", redis_url]
            result = await asyncio.to_thread(spex, "result", qid, *common, "--tree", str(tree))
            cancelled = await asyncio.to_thread(spex, "result", slow, *common)
            unknown = await asyncio.to_thread(spex, "result", "no-such-query", *common)
            top = await asyncio.to_thread(spex, "top", "--url", base, "--once")
            gone = await asyncio.to_thread(spex, "top", "--url", f"http://127.0.0.1:{free_port()}", "--once")
            answers = [http("GET", f"{base}/v1/questions/{q}") for q in (qid, slow, "no-such-query")]
            return qid, result, json.loads(tree.read_text()), cancelled, unknown, top, gone, answers
        finally:
            await cluster.stop()

    qid, result, tree, cancelled, unknown, top, gone, answers = asyncio.run(go())
    assert result.returncode == 0 and f"{qid}: " in result.stdout and "tree: " in result.stdout
    assert tree["status"] == "answered" and len(tree["nodes"]) == answers[0][1]["nodes"] + 1  # and the root
    assert {n["state"] for n in tree["nodes"]} >= {"root", "primary"}
    assert all(n["parent"] is None or n["parent"] in {m["id"] for m in tree["nodes"]} for n in tree["nodes"])
    assert cancelled.returncode == 0 and "cancelled" in cancelled.stdout
    assert answers[1] == (200, answers[1][1]) and answers[1][1]["status"] == "cancelled"
    # An unknown id: the CLI and HTTP agree (an error, a 404), neither says "no answer yet".
    assert unknown.returncode == 2 and "no question 'no-such-query'" in unknown.stderr
    assert answers[2][0] == 404 and "no question" in answers[2][1]["error"]
    assert top.returncode == 0 and "in flight" in top.stdout and "gen-0" in top.stdout
    assert gone.returncode == 2 and gone.stderr.startswith("spex: error: --url: cannot reach the ingress")
