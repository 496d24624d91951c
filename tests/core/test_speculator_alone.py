"""A query's speculator on its own, with no query machine around it: it issues speculative jobs
up to the share it is given, each at its distance's priority, never past what is already in
flight, never again after a service gave up on it; it cancels what the search can no longer
use and everything at the end; its calibration moves with its hits."""

from spex.proto.messages import PRIMARY
from spex.shared.core.commands import CancelCommand, GenerateCommand
from spex.shared.core.machine_spec import QueryStats, Speculator
from spex.shared.core.search import SearchConfig, make_algorithm
from spex.shared.core.speculation import SpecPolicy, spec_priority
from spex.shared.core.tree import Node, Tree


class Fixed:
    """A predictor that names the root's first children, each as likely as `likelihood`, until
    `dead` says the search can no longer ask for them."""

    def __init__(self, likelihood: float = 0.5) -> None:
        self.likelihood = likelihood
        self.dead: set[str] = set()

    def predict(self, view, k):
        kids = [view.child(view.tree.root, i) for i in range(6)]
        return [n for n in kids if not n.generated and not view.busy(n) and n.id not in self.dead][:k]

    def spec_alive(self, node: Node) -> bool:
        return node.id not in self.dead

    def spec_distance(self, node: Node) -> int:
        return node.index + 1

    def spec_likelihood(self, node: Node) -> float:
        return self.likelihood


def _speculator(enabled=True, predictor=None):
    tree = Tree("q", 7, 10)
    config = SearchConfig("rebase", 4)
    stats = QueryStats()
    algorithm = make_algorithm(tree, config)
    spec = Speculator(tree, algorithm, config, SpecPolicy(enabled), predictor or Fixed(), stats)
    return spec, stats


def test_it_issues_up_to_its_share_at_each_distance_priority():
    spec, stats = _speculator()
    issued = spec.housekeeping(share=3)
    assert [type(c) for c in issued] == [GenerateCommand] * 3
    assert [c.priority for c in issued] == [spec_priority(1), spec_priority(2), spec_priority(3)]
    assert stats.spec_issued == 3 and spec.in_flight == 3 and spec.settled
    assert spec.housekeeping(share=3) == []  # its share is in flight already
    assert len(spec.housekeeping(share=4)) == 1
    running, new = spec.offers(limit=2)
    assert running == [0.5] * 4 and new == [0.5, 0.5]  # calibration 1 before any evidence


def test_a_disabled_speculator_issues_and_offers_nothing():
    spec, _ = _speculator(enabled=False)
    assert spec.housekeeping(share=8) == [] and spec.offers(4) == ([], []) and spec.prompts(4) == []


def test_what_the_search_can_no_longer_use_is_cancelled_and_a_failure_never_reissued():
    predictor = Fixed()
    spec, stats = _speculator(predictor=predictor)
    first = spec.housekeeping(share=2)
    predictor.dead.add(first[0].node.id)
    spec.changed()
    again = spec.housekeeping(share=2)
    assert CancelCommand(first[0].job_id) in again and stats.spec_cancelled == 1
    spec.drop_failed(first[1].node.id, generating=True)
    spec.changed()
    reissued = {c.node.id for c in spec.housekeeping(share=2) if isinstance(c, GenerateCommand)}
    assert first[1].node.id not in reissued and stats.spec_cancelled == 2


def test_a_hit_moves_the_calibration_and_the_end_cancels_every_job():
    spec, stats = _speculator()
    jobs = spec.housekeeping(share=2)
    node = jobs[0].node
    spec.jobs[node.id].adopted = True  # the search asked for it while it ran
    spec.count_hit(spec.jobs[node.id].distance)
    assert stats.spec_adopted == 1 and stats.spec_by_distance[1] == [1, 1]
    # One hit over two priors of 0.5 issued, of which the unadopted one is still undecided:
    # (1 hit + 1) / (1.0 - 0.5 expected + 1).
    assert spec.calibration == (1 + 1.0) / (0.5 + 1.0)
    primary = spec.generate(spec.child(node.parent, 5), PRIMARY)
    assert primary.priority == PRIMARY and spec.busy(primary.node)
    cancels = spec.cancel_all()
    assert {c.job_id for c in cancels} == {jobs[0].job_id, jobs[1].job_id, primary.job_id}
    assert stats.spec_cancelled == 1 and not spec.jobs and list(spec.speculative()) == []
