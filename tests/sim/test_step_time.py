"""The engine's decode steps cost what the formula in `shared/roofline/hardware.py` says."""

import pytest

from spex.shared.roofline.capacity import spare_concurrency
from spex.shared.roofline.hardware import GPUS, MODELS, Profile
from spex.shared.sim.sweep import measure_knee
from tests.sim.conftest import req, run_all


def formula_ms(gpu, model, batch, ctx_sum):
    """That formula, written out independently of the engine code."""
    cal = gpu.calibration
    mem = (model.read_bytes + ctx_sum * model.kv_bytes_per_token) / (gpu.bandwidth_gbs * 1e9 * cal.eta_bw)
    flops = 2 * model.matmul_params * batch + 4 * model.n_layers * model.d_model * ctx_sum
    comp = flops / (gpu.peak_tflops * 1e12 * cal.eta_flop)
    return 1e3 * (cal.overhead_ms / 1e3 + cal.overhead_per_seq_ms / 1e3 * batch + max(mem, comp))


@pytest.mark.parametrize("batch", [1, 4, 32, 128])
def test_decode_step_matches_formula(engine_factory, batch):
    engine = engine_factory("Qwen2.5-7B@A6000")
    prompt_tokens, out_tokens = 50, 3  # 128 · 50 fits one prefill chunk
    for i in range(batch):
        engine.submit(req(f"r{i}", [(f"q{i}", prompt_tokens)], out_tokens), 0.0)
    engine.advance_to(engine.next_event_s())  # the prefill step; it also emits token 1
    assert engine.stats.prefill_steps == 1
    t0 = engine.clock_s
    run_all(engine)
    gpu, model = GPUS["A6000"], MODELS["Qwen2.5-7B"]
    # Two decode steps: contexts 51 and 52 tokens per sequence.
    expected = formula_ms(gpu, model, batch, batch * 51) + formula_ms(gpu, model, batch, batch * 52)
    assert (engine.clock_s - t0) * 1e3 == pytest.approx(expected, rel=1e-9)


def test_step_is_flat_below_the_knee_and_grows_above_it():
    p = Profile(GPUS["A100-80GB"], MODELS["Llama-2-7B"])
    knee = measure_knee(p, ctx=128, slack=0.5)
    assert 4 < knee < 256
    assert p.decode_step_s(knee, knee * 128) <= 1.5 * p.decode_step_s(1, 128)
    assert p.decode_step_s(4 * knee, 4 * knee * 128) > 1.5 * p.decode_step_s(1, 128)
    # The sweep over the engine agrees with the step model it runs on (the sweep's contexts
    # grow while it decodes, so it finds a slightly smaller knee).
    model_knee = 1 + spare_concurrency(p, 1, 128, 128, 0.5)
    assert 0.85 * model_knee <= knee <= model_knee
