"""`spex` imports a command's module when the command runs: `spex --version` and `spex submit`
start without the benchmark, the engines or PyTorch (each in a fresh interpreter, so what an
earlier test imported does not count)."""

import json
import subprocess
import sys

import pytest

HEAVY = ("spex.bench", "spex.shared.hf.engine", "spex.shared.sim.engine", "torch", "transformers")
PROBE = """
import json, sys
from spex.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def _imported(*argv: str) -> set[str]:
    run = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=60, check=True
    )
    return set(json.loads(run.stderr.strip().splitlines()[-1]))


@pytest.mark.parametrize("argv", [("--version",), ("submit", "--help"), ("--help",)])
def test_the_parser_loads_neither_the_benchmark_nor_torch(argv):
    modules = _imported(*argv)
    assert "spex.cli.main" in modules  # the probe ran the CLI
    loaded = sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))
    assert not loaded, f"spex {' '.join(argv)} imported {loaded}"


def test_every_command_names_a_function_that_runs_it():
    from spex.cli.main import COMMANDS, command_of

    assert all(callable(command_of(name)) for name in COMMANDS)
