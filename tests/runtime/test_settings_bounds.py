"""Every numeric setting has both bounds: infinite, not-a-number and absurdly small values are
refused in one line naming the variable and the range, by the services as processes too."""

import os
import subprocess
import sys

import pytest

from spex.shared.runtime.settings import ENV, RANGES, Settings


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SPEX_TIME_SCALE", "inf"),
        ("SPEX_TIME_SCALE", "nan"),
        ("SPEX_ENGINE_TIMEOUT_S", "inf"),
        ("SPEX_HEARTBEAT_S", "1e-9"),
        ("SPEX_LEASE_S", "1e12"),
        ("SPEX_RESULT_TTL_S", "99999999999"),
        ("SPEX_MAX_RUNNING", "100000000"),
        ("SPEX_TPOT_SLACK", "inf"),
    ],
)
def test_an_unbounded_number_is_refused_naming_the_variable_and_the_range(variable, value):
    with pytest.raises(ValueError) as err:
        Settings.from_env({variable: value})
    field, message = ENV[variable][0], str(err.value)
    assert message.startswith(f"{variable} ({field}): invalid value ") and message.endswith(RANGES[field])
    assert "\n" not in message


def test_every_range_names_a_setting():
    assert set(RANGES) <= {field for field, _ in ENV.values()}


def test_a_service_started_with_one_exits_in_one_line():
    env = {**os.environ, "SPEX_HEARTBEAT_S": "1e-9"}
    done = subprocess.run(
        [sys.executable, "-m", "spex.services.scorer"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "spex scorer: error: SPEX_HEARTBEAT_S (heartbeat_s): invalid value 1e-09; 0.01 to 600"
    )
