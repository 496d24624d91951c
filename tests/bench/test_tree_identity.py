"""Two runs' trees are identical when their structure, texts, token counts and answers agree;
rewards are compared apart, within a stated tolerance, and the largest difference is reported.
A text that differs is a different tree even with every token count equal."""

from dataclasses import replace

from spex.bench.comparison import REWARD_TOLERANCE, compare
from spex.bench.results import summarize
from spex.bench.vtime import BenchConfig, run_bench
from spex.shared.core.tree import Tree


def nudged(summary, by: float):
    """`summary` with every reward moved by `by` (what another batch shape does to them)."""
    rewards = {q: {n: r + by for n, r in nodes.items()} for q, nodes in summary.rewards.items()}
    return replace(summary, rewards=rewards)


def test_rewards_are_compared_within_the_tolerance_and_the_largest_difference_reported():
    cfg = BenchConfig(questions=4, batch_size=2, target=4)
    base = summarize(run_bench(cfg))
    spex = summarize(run_bench(replace(cfg, mode="spex")))
    exact = compare(base, spex)
    assert exact.lossless and exact.trees_identical and exact.max_reward_difference == 0.0
    noise = compare(base, nudged(spex, 1e-7))
    assert noise.lossless and abs(noise.max_reward_difference - 1e-7) < 1e-9
    off = compare(base, nudged(spex, 10 * REWARD_TOLERANCE))
    assert off.trees_identical and not off.lossless
    assert "rewards" not in spex.to_json() and "max_reward_difference" in exact.to_json()


def test_a_different_text_is_a_different_tree_and_a_reward_is_not():
    def tree(text: str, reward: float) -> Tree:
        t = Tree("q", seed=0, question_tokens=3)
        node = t.child(t.root, 0)
        node.generated, node.text, node.tokens, node.reward = True, text, 5, reward
        return t

    assert tree("3 + 4 = 7.", 0.5).digest() != tree("3 + 4 = 8.", 0.5).digest()
    assert tree("3 + 4 = 7.", 0.5).digest() == tree("3 + 4 = 7.", 0.5000001).digest()
    assert tree("3 + 4 = 7.", 0.5).rewards() != tree("3 + 4 = 7.", 0.5000001).rewards()
