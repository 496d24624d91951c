"""The same seed gives the same benchmark counts in any process: nothing a run decides may
depend on the process's string hashing (a set's order, and a float summed over it)."""

import json
import os
import subprocess
import sys

RUN = """
import json
from spex.bench.results import summarize
from spex.bench.vtime import BenchConfig, run_bench
out = {}
for algorithm, target in (("rstar", 10), ("rebase", 16)):  # sizes at which a set's order showed
    cfg = BenchConfig(algorithm=algorithm, target=target, batch_size=8, questions=16, seed=0, mode="spex",
                      objective="throughput", profile="Llemma-34B@A100-80GB")
    s = summarize(run_bench(cfg))
    out[algorithm] = [s.makespan_s, s.spec_issued, s.spec_adopted, s.trees_digest]
print(json.dumps(out))
"""


def test_two_processes_with_different_string_hashing_count_alike():
    runs = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        cmd = [sys.executable, "-c", RUN]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr
        runs.append(json.loads(proc.stdout))
    assert runs[0] == runs[1]
