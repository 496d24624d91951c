"""`spex submit`, `result`, `cancel` and `tree` over HTTP (`--url`, `--token-file`) against a
live ingress with tokens: they print what the Redis path prints, and a wrong token, a missing
one, an address nothing listens on and an unknown id are each one line naming the flag. One
in-process cluster serves the module."""

import asyncio
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from spex.cli.main import main
from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import threaded_cluster

TOKEN = "alice-secret-token-0001"


def spex(*args):
    return subprocess.run(
        [sys.executable, "-m", "spex.cli", *args], capture_output=True, text=True, timeout=120
    )


def spex_all(*commands):
    """Several `spex` commands at once (each is mostly its interpreter starting)."""
    with ThreadPoolExecutor(len(commands)) as pool:
        return list(pool.map(lambda args: spex(*args), commands))


@pytest.fixture(scope="module")
def live(redis_server, tmp_path_factory):
    """One in-process cluster with tokens for the module, on a loop in a thread of its own (the
    tests run `spex` processes against it meanwhile)."""
    redis.Redis.from_url(redis_server.url).flushall()
    tmp = tmp_path_factory.mktemp("http-cli")
    (tmp / "tokens").write_text(f"alice {TOKEN}\n")
    (tmp / "token").write_text(TOKEN + "\n")
    (tmp / "wrong").write_text("not-alices-token-00000\n")
    with threaded_cluster(redis_server.url, auth_tokens_file=str(tmp / "tokens")) as (url, cluster, loop):
        yield url, tmp, redis_server.url, cluster, loop


def test_submit_result_tree_over_http_print_what_the_redis_path_prints(live):
    url, tmp, redis_url, _, _ = live
    http = ["--url", url, "--token-file", str(tmp / "token")]
    rstar = ("--algorithm", "rstar", "--target", "4")
    waited, later = spex_all(
        ("submit", "What is 5 + 6?", *rstar, "--wait", "60", "--baseline-twin", *http),
        ("submit", "What is 1 + 2?", *rstar, *http),
    )
    assert waited.returncode == 0 and later.returncode == 0, waited.stderr + later.stderr
    qid, other = waited.stdout.split(":")[0], later.stdout.strip()
    result, over_redis, tree, printed = spex_all(
        ("result", other, "--wait", "60", *http),
        ("result", qid, "--redis", redis_url),
        ("tree", qid, "--out", str(tmp / "tree.json"), *http),
        ("tree", qid, *http),
    )
    assert waited.stdout.startswith(f"{qid}: ") and "  step 1: " in waited.stdout
    # The same lines (the submission's own adds its twin's verdict), and what answered it.
    twin_line = f"  baseline twin {qid}.baseline: the same tree: lossless"
    assert twin_line in waited.stdout, waited.stdout
    kept = waited.stdout.split(twin_line)[0]  # its last line (wrapped, as rich wraps at 80)
    assert over_redis.returncode == 0 and over_redis.stdout == kept
    assert "  answered by: sim, synthetic content, reward sim-prm\n" in kept
    assert "  note: a demonstration: synthetic content on a simulated GPU" in kept.replace("\n", " ")
    assert result.returncode == 0 and result.stdout.startswith(f"{other}: ")
    saved = json.loads((tmp / "tree.json").read_text())
    assert (
        tree.returncode == 0
        and tree.stdout == f"tree: {len(saved['nodes'])} nodes (answered) -> {tmp / 'tree.json'}\n"
    )
    assert saved == json.loads(printed.stdout) and saved["query_id"] == qid and saved["status"] == "answered"
    assert {n["state"] for n in saved["nodes"]} >= {"root", "primary"}


def test_cancel_over_http(live):
    url, tmp, _, cluster, loop = live
    http = ["--url", url, "--token-file", str(tmp / "token")]
    # With its coordinator stopped, the question waits, unsearched, to be cancelled.
    asyncio.run_coroutine_threadsafe(_stop(cluster, "coord-0"), loop).result(30)
    try:
        submitted = spex("submit", "What is 7 + 8?", *http)
        qid = submitted.stdout.strip()
        cancelled = spex("cancel", qid, *http)
    finally:
        asyncio.run_coroutine_threadsafe(cluster.start("coordinator", "coord-0"), loop).result(30)
    result = spex("result", qid, "--wait", "60", *http)
    assert submitted.returncode == 0 and cancelled.returncode == 0
    assert cancelled.stdout == f"{qid}: cancelling\n"
    assert result.returncode == 0 and result.stdout == f"{qid}: cancelled\n"


async def _stop(cluster, name):
    task, stop, _ = cluster.tasks.pop(name)
    stop.set()
    await task


def test_http_mistakes_are_one_line_naming_the_flag(live, capsys):
    url, tmp, _, _, _ = live
    gone = f"http://127.0.0.1:{free_port()}"
    said = {}
    for name, argv in {
        "wrong": ["submit", "What is 1 + 1?", "--url", url, "--token-file", str(tmp / "wrong")],
        "none": ["result", "some-id", "--url", url],
        "refused": ["submit", "What is 1 + 1?", "--url", gone],
        "unknown": ["result", "no-such-query", "--url", url, "--token-file", str(tmp / "token")],
        "not_a_url": ["cancel", "some-id", "--url", url.removeprefix("http://")],
    }.items():
        status = main(argv)  # as the `spex` command runs it: anything but a one-line error raises
        out = capsys.readouterr()
        assert status == 2 and out.out == "" and len(out.err.splitlines()) == 1, (name, out)
        said[name] = out.err
    assert said["wrong"].startswith(f"spex: error: --token-file: the ingress at {url} refused the token")
    assert said["none"].startswith(f"spex: error: --token-file: the ingress at {url} needs a token")
    assert said["refused"].startswith(f"spex: error: --url: cannot reach the ingress at {gone}: ")
    assert said["unknown"] == "spex: error: query_id: no question 'no-such-query'\n"
    assert said["not_a_url"].startswith("spex: error: --url: give the ingress's URL, http://HOST:PORT")
