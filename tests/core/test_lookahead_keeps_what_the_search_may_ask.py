"""The look-ahead predictor keeps a speculative node while the search may still ask for it:

- a level search (REBASE) leaves a node for good once it has decided its width, so the node's
  speculative children die at once — the same verdicts as REBASE's own hand-written rule, an
  independent reference, after every event;
- a depth-first search (rStar) comes back to the root every rollout, so its speculative nodes
  live while a rollout is left after the one in progress (a miss now may be a later rollout's
  hit); in its last rollout only what lies below the path it is on can still be asked for.
"""

from spex.shared.core.commands import CancelCommand
from spex.shared.core.lookahead import LookaheadPredictor
from tests.core.machine_runs import drive


def _lookahead(held: list[LookaheadPredictor]):
    def factory(algorithm):
        held.append(LookaheadPredictor(algorithm))
        return held[-1]

    return factory


def test_a_level_search_drops_a_node_once_its_width_is_decided():
    held: list[LookaheadPredictor] = []
    disagreements, judged = [], 0

    def check(machine):
        nonlocal judged
        for handle in list(machine.speculative()):  # a verdict may name new handles
            judged += 1
            if held[0].spec_alive(handle) != machine.algorithm.spec_alive(handle):
                disagreements.append((handle.id, handle.depth))

    for order in (0, 1):
        held.clear()
        machine, log = drive("rebase", 16, 2, True, order_seed=order, after_event=check,
                             predictor=_lookahead(held))  # fmt: skip
        cancelled = {c.job_id.rsplit(".", 1)[0] for c in log if isinstance(c, CancelCommand)}
        assert cancelled and not cancelled & set(machine.tree.nodes)
    assert judged > 100 and not disagreements


def test_a_depth_first_search_keeps_its_misses_while_a_rollout_is_left():
    held: list[LookaheadPredictor] = []
    early: set[str] = set()  # speculative jobs held while a rollout was left
    late: list[int] = []  # speculative jobs held once none was

    def check(machine):
        search = machine.algorithm
        if machine.done:
            return
        issued = [h for h in machine.speculative() if h.generated or machine.busy(h)]
        if search.rollout < search.config.target - 1:
            for handle in issued:
                assert held[0].spec_alive(handle), handle.id  # a later rollout may still come to it
                early.add(handle.id)
        elif search.rollout == search.config.target - 1:  # the last goes on below its path only
            assert all(_below(h, search.path[-1]) for h in issued)
            late.append(len(issued))
        else:  # every rollout done: the search waits for scores, nothing more to ask for
            late.append(len(issued))
            assert not issued

    machine, _ = drive("rstar", 8, 3, True, after_event=check, predictor=_lookahead(held))
    unused = early - set(machine.tree.nodes)
    assert len(early) > 20 and unused and late  # misses were kept, then dropped at the end


def _below(node, ancestor) -> bool:
    while node is not None and node is not ancestor and node.id != ancestor.id:
        node = node.parent
    return node is not None
