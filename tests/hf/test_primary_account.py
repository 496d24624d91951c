"""The in-process engine's account of its primaries' steps (`hf.tpot.PrimaryAccount`): the
step without speculation comes from the clean steps this engine ran once it has seen enough,
so a step curve that prices speculative prompt rows too low cannot hide their cost from the
TPOT governor; before that, the curve's counterfactual."""

from __future__ import annotations

import json

import pytest

from spex.shared.engine.api import EngineStats
from spex.shared.hf.tpot import PassRows, PrimaryAccount
from spex.shared.roofline.measured import parse_measured

CTX = 200  # tokens each row attends over


def true_step_s(rows: int) -> float:
    """This engine now: 10 ms a step and 2 ms a row, decode or prompt."""
    return 0.010 + 0.002 * rows


def cheap_curve():
    """A curve measured under other conditions: a row costs a quarter of what it does now."""
    cells = [
        {"batch": b, "context": c, "tpot_s": 0.010 + 0.0005 * b, "tokens_per_s": 1.0}
        for b in (1, 2, 4, 8, 16, 32)
        for c in (128, 512)
    ]
    return parse_measured(json.dumps({"meta": {"engine": "cheap"}, "cells": cells}), "test")


def rows(
    primary_decode: int, spec_decode: int = 0, spec_prompt: int = 0, primary_prompt: int = 0
) -> PassRows:
    mine = primary_decode + primary_prompt
    return PassRows(primary_decode, spec_decode, primary_prompt, spec_prompt, mine * CTX,
                    (mine + spec_decode + spec_prompt) * CTX)  # fmt: skip


def mixed_step(account: PrimaryAccount, stats: EngineStats) -> None:
    """4 primaries decoding beside 16 prompt rows of a speculative job's new prompt."""
    r = rows(4, spec_prompt=16)
    dt = true_step_s(20)
    account.step(stats, dt, dt, primaries=4, sequences=4, rows=r)


def growth(stats: EngineStats) -> float:
    return stats.primary_step_s / stats.primary_alone_s - 1


def test_before_the_fit_has_seen_clean_steps_the_curve_scales_the_step():
    account, stats = PrimaryAccount(), EngineStats()
    account.curve = cheap_curve()
    mixed_step(account, stats)
    # The curve says 20 rows cost 20 ms and 4 rows 12 ms: the speculative rows look +67%...
    assert growth(stats) == pytest.approx(0.020 / 0.012 - 1, rel=0.05)
    # ... where they cost +178% (18 ms alone, 50 ms with them).
    assert true_step_s(20) / true_step_s(4) - 1 == pytest.approx(1.778, rel=0.01)


def test_clean_steps_teach_the_account_what_the_speculative_rows_cost():
    account, stats = PrimaryAccount(), EngineStats()
    account.curve = cheap_curve()
    for i in range(64):  # steps with no speculative work: primaries decoding, some prompts
        d, p = 1 + i % 8, (0, 0, 12, 40)[i % 4]
        account.step(stats, true_step_s(d + p), true_step_s(d + p), d, d, rows(d, primary_prompt=p))
    assert stats.primary_step_s == stats.primary_alone_s  # clean: measured is alone
    clean = EngineStats()
    mixed_step(account, clean)
    assert growth(clean) == pytest.approx(true_step_s(20) / true_step_s(4) - 1, rel=0.05)
    # Where the primaries' time went: the speculative prompt rows, 16 × 2 ms for 4 primaries.
    assert clean.primary_spec_prompt_s == pytest.approx(4 * 16 * 0.002, rel=0.05)
    assert clean.primary_spec_decode_s == 0.0


def test_without_a_curve_no_primary_step_is_counted():
    account, stats = PrimaryAccount(), EngineStats()
    mixed_step(account, stats)
    assert stats.primary_steps == 0  # an engine with no curve budgets no speculation
