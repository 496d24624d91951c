"""The cost-aware admission controller on synthetic step curves: a flat one (a GPU below its
knee), a steep one (this CPU: a step grows ~9% per sequence) and one with a knee. Each test
names what the count-only policy before it (`spare_concurrency` at a slack, then the pool
filled in the predictor's order, any value alike) would have done instead."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from spex.shared.roofline.admission import FLAT, Offer, admit, divide, even_split
from spex.shared.roofline.capacity import spare_concurrency

CONTEXT = 256.0


@dataclass(frozen=True)
class Linear:
    """A step of `base` × (1 + growth per extra sequence), up to `knee` sequences flat."""

    growth: float
    knee: int = 1

    def decode_step_s(self, batch: int, context_tokens: float) -> float:
        if batch <= 0:
            return 0.0
        return 0.020 * (1 + self.growth * max(0, batch - self.knee))


STEEP = Linear(0.09)
KNEE = Linear(0.1, knee=8)


def offer(qid: str, *values: float, running: tuple[float, ...] = ()) -> Offer:
    return Offer(qid, running, values, CONTEXT)


def test_on_a_steep_curve_throughput_takes_only_the_likely_candidates():
    offers = [offer("q", 1.0, 1.0, 1.0, 0.02, 0.02)]
    a = admit(STEEP, 1, CONTEXT, offers, "throughput")
    assert a.shares == {"q": 3} and a.bound == "rate"
    # The count-only policy takes as many as the slack buys, whatever they are worth: at the
    # fixed targets, none, one, two or five — never the three likely ones alone.
    counts = [spare_concurrency(STEEP, 1, CONTEXT, CONTEXT, slack) for slack in (0.05, 0.10, 0.20, 0.50)]
    assert counts == [0, 1, 2, 5]


def test_on_a_flat_curve_throughput_fills_to_the_limit():
    a = admit(FLAT, 2, 2 * CONTEXT, [offer("q", *[0.3] * 20)], "throughput", limit=12)
    assert a.shares == {"q": 12} and a.bound == "limit"


def test_throughput_fills_to_the_knee_and_past_it_only_for_likely_candidates():
    unlikely = admit(KNEE, 2, 2 * CONTEXT, [offer("q", *[0.3] * 20)], "throughput")
    assert unlikely.shares == {"q": 6}  # 2 primaries + 6 = the knee: the next costs 10% of a step
    likely = admit(KNEE, 2, 2 * CONTEXT, [offer("q", *[1.0] * 20)], "throughput")
    assert likely.shares["q"] > 6  # a count-only policy gives both the same


def test_with_every_primary_waiting_on_a_reward_anything_likely_runs():
    a = admit(STEEP, 0, 0.0, [offer("q", 0.4, 0.3, 0.2)], "throughput")
    assert a.shares == {"q": 3}
    assert admit(STEEP, 0, 0.0, [offer("q", 0.0)], "throughput").shares == {"q": 0}


def test_slo_keeps_the_room_of_the_slack_and_spends_it_on_the_most_valuable_queries():
    offers = [offer("a", 0.1, 0.1, 0.1), offer("b", 0.9, 0.9, 0.9), offer("c", 0.5, 0.5)]
    room = spare_concurrency(KNEE, 2, 2 * CONTEXT, CONTEXT, 0.05)
    a = admit(KNEE, 2, 2 * CONTEXT, offers, "slo", slack=0.05)
    assert sum(a.shares.values()) == room == 6 and a.bound == "slack"
    # Each query's first candidate (the floor), then by value: b's two more, then c's.
    assert a.shares == {"a": 1, "b": 3, "c": 2}
    # Short of room for the floor, the likeliest queries' first candidates come first.
    short = admit(KNEE, 2, 2 * CONTEXT, offers, "slo", slack=0.05, limit=2)
    assert short.shares == {"a": 0, "b": 1, "c": 1}


def test_running_jobs_stay_counted_and_a_query_is_taken_in_its_own_order():
    offers = [offer("a", 0.2, 0.9, running=(0.8, 0.8)), offer("b", 0.5)]
    # Up to the knee (8) beside 2 primaries and a's 2 running jobs: all three candidates.
    assert admit(KNEE, 2, 2 * CONTEXT, offers, "slo", slack=0.0).shares == {"a": 4, "b": 1}
    # Room for two more: b's head, then a's head — a's 0.9 never jumps its 0.2 (its order).
    a = admit(KNEE, 2, 2 * CONTEXT, offers, "throughput", limit=4)
    assert a.shares == {"a": 3, "b": 1} and a.bound == "limit"


def test_divide_and_even_split_share_a_pool_set_elsewhere():
    offers = [offer("a", 0.1, 0.1), offer("b", 0.9, 0.9, 0.9)]
    assert divide(offers, 3) == {"a": 1, "b": 2}
    assert even_split(offers, 3) == {"a": 2, "b": 1}
    assert divide(offers, 0) == even_split(offers, 0) == {"a": 0, "b": 0}
    # Running jobs stay whatever the pool: what is left goes to the query with fewest first.
    busy = [offer("a", 0.5, running=(0.5, 0.5)), offer("b", 0.5, 0.5)]
    assert even_split(busy, 3) == {"a": 2, "b": 1} and even_split(busy, 1) == {"a": 2, "b": 0}


def test_an_unknown_objective_is_refused():
    with pytest.raises(ValueError, match="objective"):
        admit(FLAT, 1, 1.0, [], "latency")  # type: ignore[arg-type]


@dataclass(frozen=True)
class Rows:
    """A CPU-like pass: every row, decode or prompt, adds `row_s` to a step of `base_s`."""

    row_s: float = 0.002
    base_s: float = 0.020

    def decode_step_s(self, batch: int, context_tokens: float) -> float:
        return self.base_s + self.row_s * batch if batch > 0 else 0.0

    def mixed_step_s(self, batch: int, ctx_sum: float, chunks) -> float:
        return self.decode_step_s(batch, ctx_sum) + self.row_s * sum(n for n, _ in chunks)


def test_the_controller_counts_speculative_prompt_passes():
    """A candidate's prompt rows cost its pass what decode rows would, spread over the tokens it
    decodes: 16 prompt tokens over an 8-token step are two rows more a step."""
    curve = Rows()
    base = curve.decode_step_s(4, 4 * CONTEXT)  # 28 ms: 6% is 1.68 ms, less than a row's 2 ms
    cached = Offer("q", (), (0.9,) * 6, CONTEXT, (0,) * 6, step_tokens=8)
    uncached = Offer("q", (), (0.9,) * 6, CONTEXT, (16,) * 6, step_tokens=8)
    assert admit(curve, 4, 4 * CONTEXT, [cached], "slo", slack=0.30).shares == {"q": 4}  # 8.4 ms: 4 rows
    a = admit(curve, 4, 4 * CONTEXT, [uncached], "slo", slack=0.30)
    assert a.shares == {"q": 1} and a.bound == "slack"  # each costs 1 + 16/8 = 3 rows a step
    # Only the prompt's first pass pays it: spread over a longer step, it costs less.
    long = Offer("q", (), (0.9,) * 6, CONTEXT, (16,) * 6, step_tokens=64)
    assert admit(curve, 4, 4 * CONTEXT, [long], "slo", slack=0.30).shares == {"q": 3}
    assert base == pytest.approx(0.028)


def test_a_candidate_whose_prompt_is_cached_takes_the_room_a_costlier_one_leaves():
    """Under slo the controller skips a candidate whose prompt does not fit and admits a later
    one whose prompt a sibling already had computed; with no prompts it stops at the first
    that does not fit, as before."""
    offers = [Offer("a", (), (0.9,), CONTEXT, (64,), step_tokens=8), Offer("b", (), (0.5,), CONTEXT, (0,))]
    a = admit(Rows(), 4, 4 * CONTEXT, offers, "slo", slack=0.10)
    assert a.shares == {"a": 0, "b": 1}


def test_throughput_weighs_a_prompt_against_what_the_candidate_is_worth():
    """The useful-rate test prices the prompt too: beside 4 primaries on a CPU-like curve a
    likely candidate is worth a short prompt, not a long one; a less likely one is worth its
    decode row alone."""

    def admitted(p: float, prompt: int) -> int:
        offer = Offer("q", (), (p,), CONTEXT, (prompt,), step_tokens=8)
        return admit(Rows(), 4, 4 * CONTEXT, [offer], "throughput").shares["q"]

    assert admitted(0.9, 8) == 1 and admitted(0.9, 32) == 0
    assert admitted(0.3, 0) == 1 and admitted(0.3, 8) == 0
