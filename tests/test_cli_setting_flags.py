"""A `spex up` flag that sets one setting, leaving it to its variable when absent, says what the
setting's row says and names the variable: its help cannot drift from the setting's."""

import argparse
from dataclasses import fields

from spex.cli.main import build_parser
from spex.cli.runtime import UP_FLAGS
from spex.shared.runtime.settings import Settings
from spex.shared.runtime.settings_schema import flag_help, row

# `spex up` decides these itself (the engine from --model, a URL per generator, real content on a
# real engine, a metrics port per service), so their flags say so in words of their own.
OWN_WORDS = {"--engine", "--engine-url", "--content", "--metrics-port"}


def _up_options() -> dict[str, argparse.Action]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {option: action for action in sub.choices["up"]._actions for option in action.option_strings}


def test_a_flag_that_sets_one_setting_has_the_settings_help():
    field_of = {flag: field for field, flag in UP_FLAGS.items()}
    names = {f.name for f in fields(Settings)}
    checked = set()
    for flag, action in _up_options().items():
        field = field_of.get(flag) or (action.dest if action.dest in names else None)
        if field is None or flag in OWN_WORDS:
            continue
        assert action.help == flag_help(Settings, field), flag
        checked.add(flag)
    assert {"--host", "--port", "--deterministic", "--time-scale", "--objective"} <= checked


def test_the_metrics_port_flag_says_its_own_words_once_then_the_variable():
    help_text = _up_options()["--metrics-port"].help
    assert help_text == flag_help(Settings, "metrics_port", meaning=help_text.split(" (default: ")[0])
    assert help_text.startswith("Prometheus /metrics ports (0: off): the first service's")
    assert help_text.endswith("(default: $SPEX_METRICS_PORT, else 0)") and help_text.count("(0: off") == 1


def test_the_help_says_the_variable_then_the_default():
    f = next(f for f in fields(Settings) if f.name == "http_port")
    assert flag_help(Settings, "http_port") == f"{row(f).help} (default: $SPEX_HTTP_PORT, else 8080)"
    assert flag_help(Settings, "tpot_target", variable=False).endswith("(0.05 = +5%%)")  # argparse's %
