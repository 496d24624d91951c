"""An engine is chosen by name from one table per driver, keyed by `EngineName`: every name has
its builder, and a name outside the set is a one-line error — never the in-process engine."""

import pytest

from spex.bench.vtime.config import BenchConfig
from spex.bench.vtime.content import ENGINE_BUILDERS as BENCH_BUILDERS
from spex.bench.vtime.content import make_engines
from spex.services.generator.engines import ENGINE_BUILDERS as GENERATOR_BUILDERS
from spex.services.generator.engines import live_engine
from spex.shared.engine import ENGINES, SERVERS
from spex.shared.runtime.settings import Settings


def _one_line(err: pytest.ExceptionInfo[ValueError]) -> str:
    message = str(err.value)
    assert message and "\n" not in message, message
    return message


def test_every_engine_name_has_a_builder_in_each_table():
    assert set(ENGINES) == {"sim", "hf", *SERVERS}
    assert set(GENERATOR_BUILDERS) == set(BENCH_BUILDERS) == set(ENGINES)


def test_the_settings_refuse_an_unknown_engine_naming_the_known_ones():
    with pytest.raises(ValueError) as err:
        Settings.from_env({"SPEX_ENGINE": "tpu"})
    message = _one_line(err)
    assert message.startswith("SPEX_ENGINE (engine): invalid value 'tpu'")
    assert all(name in message for name in ENGINES)


def test_a_generator_never_falls_back_to_the_in_process_engine():
    settings = Settings()
    object.__setattr__(settings, "engine", "tpu")  # past the settings' own check
    with pytest.raises(ValueError) as err:
        live_engine(settings)
    assert _one_line(err).startswith("SPEX_ENGINE: unknown engine 'tpu'")


def test_the_bench_refuses_an_unknown_engine():
    cfg = BenchConfig(backend="tpu")
    with pytest.raises(ValueError) as err:
        cfg.validate()
    assert _one_line(err).startswith("engine: must be one of sim, hf, vllm, sglang, not 'tpu'")
    with pytest.raises(ValueError) as err:
        make_engines(cfg)
    assert _one_line(err).startswith("engine: must be one of")
