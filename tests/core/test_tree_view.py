"""What watchers see of a query's tree (`TreeWatch`): every node in one state, moving only
forward (speculative → adopted, unused or cancelled; given up → asked for again), the final
tree exactly the search's, and a step's text sent once yet folded back whole."""

import pytest

from spex.proto import NodeEvent
from spex.shared.core.view import TreeWatch
from spex.shared.runtime.views import fold_tree
from tests.core.machine_runs import drive

ALLOWED = {
    ("speculative", "adopted"), ("speculative", "unused"), ("speculative", "cancelled"),
    ("unused", "primary"), ("cancelled", "primary"), ("cancelled", "adopted"), ("unused", "adopted"),
    ("cancelled", "speculative"), ("unused", "speculative"),
}  # fmt: skip


def watched(algorithm, target, order_seed):
    """Drive a speculating query, looking at its tree after every event as the coordinator does."""
    watch, seen = TreeWatch(), []

    def look(machine):
        seen.extend(watch.changes(machine))

    machine, _ = drive(algorithm, target, 5, speculate=True, order_seed=order_seed, after_event=look)
    look(machine)
    return machine, seen


@pytest.mark.parametrize(("algorithm", "target"), [("rebase", 8), ("rstar", 8), ("ets", 8), ("rest", 6)])
def test_states_move_forward_and_end_as_the_search_s_tree(algorithm, target):
    machine, seen = watched(algorithm, target, order_seed=1)
    history: dict[str, list[str]] = {}
    for view, _ in seen:
        states = history.setdefault(view.id, [])
        if not states or states[-1] != view.state:
            states.append(view.state)
    for nid, states in history.items():
        for before, after in zip(states, states[1:]):
            assert (before, after) in ALLOWED, (nid, states)
    final = {view.id: view for view, _ in seen}  # each node's last view
    tree = {n.id: n for n in machine.tree}
    for nid, node in tree.items():
        view = final[nid]
        want = "root" if node.parent is None else "adopted" if nid in machine.adopted else "primary"
        assert view.state == want
        assert view.generated and not view.running and view.text == node.text and view.reward == node.reward
    spec = [nid for nid in final if nid not in tree]
    assert spec and all(final[nid].state in ("unused", "cancelled") for nid in spec)  # none left hanging
    assert machine.adopted and {n for n in final if final[n].state == "adopted"} == machine.adopted
    assert sum(final[n].state == "adopted" for n in final) == machine.stats.spec_adopted


def test_a_step_s_text_is_sent_once_and_folded_back_whole():
    machine, seen = watched("rebase", 8, order_seed=0)
    events = [
        NodeEvent(
            msg_id=f"e{i}",
            query_id=machine.query_id,
            node_id=v.id,
            state=v.state,
            parent_id=v.parent,
            generated=v.generated,
            text=v.text if new else "",
            reward=v.reward,
            t_s=float(i),
        )  # fmt: skip
        for i, (v, new) in enumerate(seen)
    ]
    sent = [e for e in events if e.text]
    assert len(sent) == len({e.node_id for e in sent})  # each text once
    folded = {n["id"]: n for n in fold_tree(events)}
    for node in machine.tree:
        assert folded[node.id]["text"] == node.text
        assert folded[node.id]["state"] in ("root", "primary", "adopted")
        times = folded[node.id]["times"]
        assert times["issued_s"] <= (times["generated_s"] or 0) or node.parent is None
