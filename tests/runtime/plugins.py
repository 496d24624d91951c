"""Search plug-ins for the tests: the example of `examples/searches/` on the Python path, a
package installed by an entry point (a `.dist-info` on a temporary Python path, as pip leaves
one), and the registry put back as it was after a test that loads either."""

import contextlib
import sys
from pathlib import Path

from spex.shared.core.search import SEARCHES
from spex.shared.runtime import searches

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "searches"
EXAMPLE_MODULE = "pruned_self_consistency"  # registers `pruned_sc`

GREEDY = '''
"""Greedy best-first: each step the best of `width` children by the PRM, to an answer."""

from dataclasses import dataclass

from spex.search import Need, SearchAlgorithm, apply_params


@dataclass(frozen=True)
class Params:
    width: int = 3


class Greedy(SearchAlgorithm):
    name = "ep_greedy"
    family = "dfs"
    default_selection = "best"
    parameters = Params

    def run(self):
        width, node = apply_params(Params(), self.config.params).width, self.tree.root
        for _ in range(8):
            kids = [self.tree.child(node, i) for i in range(width)]
            yield Need(kids)
            node = max(kids, key=lambda n: n.reward)
            if node.terminal:
                return [node]
        return []
'''


def install_entry_point(where: Path, value: str = "spex_test_greedy:Greedy", name: str = "ep_greedy") -> Path:
    """A distribution `spex-test-greedy` in `where` (a folder to put on the Python path), whose
    `spex.searches` entry point `name` is `value`."""
    (where / "spex_test_greedy.py").write_text(GREEDY)
    info = where / "spex_test_greedy-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: spex-test-greedy\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[spex.searches]\n{name} = {value}\n")
    return where


PLUGIN_MODULES = (EXAMPLE_MODULE, "spex_test_greedy", "spex_test_broken", "spex_test_empty")


@contextlib.contextmanager
def registry_restored():
    """Whatever plug-ins a test loads, the registry, the loader's memory, the Python path and
    the plug-ins' modules are as before afterwards."""
    saved = dict(SEARCHES), dict(searches._origins), set(searches._imported), searches._scanned
    path = list(sys.path)
    try:
        yield
    finally:
        SEARCHES.clear()
        SEARCHES.update(saved[0])
        searches._origins.clear()
        searches._origins.update(saved[1])
        searches._imported.clear()
        searches._imported.update(saved[2])
        searches._scanned = saved[3]
        for name in PLUGIN_MODULES:
            sys.modules.pop(name, None)
        sys.path[:] = path
