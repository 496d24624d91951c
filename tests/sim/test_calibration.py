"""Simulator fidelity: the simulated decode step is within 15% of published measurements
(listed in `shared/roofline/hardware.py`), with one calibration per GPU family."""

import pytest

from spex.shared.roofline.hardware import parse_profile

# (profile, batch, mean context per sequence, measured ms, source)
ANCHORS = [
    ("Llama-2-7B@A100-80GB", 1, 64, 9.0, "LMDeploy a100_fp16.md, 1/128"),
    ("Llama-2-7B@A100-80GB", 64, 64, 12.0, "LMDeploy, 1/128"),
    ("Llama-2-7B@A100-80GB", 16, 1152, 15.0, "LMDeploy, 128/2048"),
    ("Llama-2-7B@A100-80GB", 32, 1152, 21.0, "LMDeploy, 128/2048"),
    ("Llama-2-7B@A100-80GB", 64, 1152, 30.0, "LMDeploy, 128/2048"),
    ("Llama-3-8B@H100", 1, 132, 7.4, "sglang #1008, 128/8"),
    ("Llama-3-8B@H100", 128, 132, 11.8, "sglang #1008, 128/8"),
    ("Qwen2.5-7B@A6000", 1, 150, 21.9, "vLLM 0.23 report, short prompts, ~51 out"),
    ("Qwen2.5-7B@A6000", 64, 150, 27.5, "same"),
    ("Qwen2.5-7B@A6000", 256, 150, 53.1, "same"),
    ("CodeLlama-34B@H100", 1, 2000, 26.0, "vLLM 0.11 engine log, ~2k context"),
]


@pytest.mark.parametrize(("profile", "batch", "ctx", "measured_ms", "source"), ANCHORS)
def test_decode_step_within_15_percent_of_measurement(profile, batch, ctx, measured_ms, source):
    simulated_ms = parse_profile(profile).decode_step_s(batch, batch * ctx) * 1e3
    assert simulated_ms == pytest.approx(measured_ms, rel=0.15), source


@pytest.mark.parametrize(
    "profile", ["Llemma-7B@A6000", "Llama-2-7B@A100-80GB", "Llama-3-8B@H100", "Llemma-34B@A100-80GB"]
)
def test_batch_one_decode_uses_70_to_85_percent_of_bandwidth(profile):
    p = parse_profile(profile)
    step = p.decode_step_s(1, 128)
    achieved = p.model.read_bytes / step / (p.gpu.bandwidth_gbs * 1e9)
    assert 0.70 <= achieved <= 0.85
