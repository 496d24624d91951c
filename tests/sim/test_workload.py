"""The synthetic workload is deterministic, knob-driven, and rejects bad knobs by name."""

import pytest

from spex.shared.sim.workload import SyntheticWorkload, WorkloadKnobs, load_knobs


def test_same_seed_same_content_different_seed_different_content():
    a, b, c = (SyntheticWorkload(WorkloadKnobs(), s, "bfs") for s in (1, 1, 2))
    qa, qb, qc = a.query(5), b.query(5), c.query(5)
    assert qa == qb and qa != qc
    path = ["n1", "n2", "n3"]
    assert a.generate(qa, path) == b.generate(qb, path)
    assert a.prm_reward(qa, path) == b.prm_reward(qb, path)


def test_derailed_parent_has_only_derailed_children():
    w = SyntheticWorkload(WorkloadKnobs(derail_base=0.5, derail_scale=0.0), 0, "dfs")
    q = w.query(0)
    for i in range(200):
        parent = ["p", f"x{i}"]
        if not w.on_track(q, parent):
            assert not w.on_track(q, [*parent, "child"])


def test_lengths_follow_the_style_and_cap():
    k = WorkloadKnobs()
    dfs = SyntheticWorkload(k, 0, "dfs")
    bfs = SyntheticWorkload(k, 0, "bfs")
    q = dfs.query(0)
    dfs_lengths = [dfs.generate(q, [f"n{i}"]).tokens for i in range(300)]
    bfs_gens = [bfs.generate(q, [f"n{i}"]) for i in range(300)]
    assert min(dfs_lengths) >= 50 and max(dfs_lengths) <= 100
    assert max(g.tokens for g in bfs_gens) == k.step_token_cap  # the long tail hits the cap
    assert all(g.finish_reason == "length" for g in bfs_gens if g.tokens == k.step_token_cap)


def test_prm_separates_on_track_from_derailed_on_average():
    w = SyntheticWorkload(WorkloadKnobs(derail_base=0.5, derail_scale=0.0), 3, "bfs")
    q = w.query(0)
    on, off = [], []
    for i in range(400):
        path = [f"n{i}"]
        (on if w.on_track(q, path) else off).append(w.prm_reward(q, path))
    assert sum(on) / len(on) > sum(off) / len(off) + 0.05


def test_terminals_answer_and_on_track_answers_are_correct():
    w = SyntheticWorkload(WorkloadKnobs(terminal_base=1.0, rushed_answer_p=0.0), 0, "dfs")
    q = w.query(0)
    for i in range(50):
        path = [f"a{i}", f"b{i}"]
        gen = w.generate(q, path)
        assert gen.answer is not None and f"The answer is {gen.answer}" in gen.text
        assert (gen.answer == q.reference_answer) == w.on_track(q, path)


def test_rushed_answers_give_the_trap_early_and_fade_with_depth():
    knobs = WorkloadKnobs(terminal_base=1.0, derail_base=0.0, derail_scale=0.0)  # all on track
    w = SyntheticWorkload(knobs, 0, "dfs")
    q = w.query(0)
    by_depth = {}
    for depth in (1, 3, 5):
        answers = [w.generate(q, [f"n{i}.{d}" for d in range(depth)]).answer for i in range(400)]
        wrong = [a for a in answers if a != q.reference_answer]
        assert len(set(wrong)) <= 1  # every rushed answer is the same trap
        by_depth[depth] = len(wrong) / len(answers)
    # 0.5 at depth 1, 0.25 at depth 3 (0.5 · (1 − 2/4)), none from depth 5 on.
    assert by_depth[1] == pytest.approx(0.5, abs=0.07) and by_depth[3] == pytest.approx(0.25, abs=0.06)
    assert by_depth[5] == 0.0


def test_knobs_from_toml_and_overrides(tmp_path):
    f = tmp_path / "w.toml"
    f.write_text("[workload]\nprm_noise = 0.3\nwrong_answers = 5\n")
    k = load_knobs(f, ["prm_noise=0.7"])
    assert (k.prm_noise, k.wrong_answers) == (0.7, 5)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["bogus=1"], "unknown workload knob 'bogus'"),
        (["wrong_answers=two"], "workload knob 'wrong_answers'"),
        (["wrong_answers=0"], "workload knob 'wrong_answers'"),
        (["prm_noise"], "expected KEY=VALUE"),
    ],
)
def test_bad_knobs_name_the_field(overrides, message):
    with pytest.raises(ValueError, match=message):
        load_knobs(None, overrides)
