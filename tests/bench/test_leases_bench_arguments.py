"""`python -m spex.bench.leases` refuses a bad `--in-flight` in one line naming the flag, and
its table has a row per count with every column."""

import pytest

from spex.bench.leases import COLUMNS, main, table


@pytest.mark.parametrize("given", ["0", "200,x", ""])
def test_a_bad_in_flight_is_one_line_naming_the_flag(given, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--in-flight", given])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--in-flight" in err and "Traceback" not in err


def test_the_table_has_a_row_per_count():
    rows = [dict.fromkeys(COLUMNS, 1) | {"in_flight": n} for n in (200, 2000)]
    lines = table({"rows": rows}).splitlines()
    assert len(lines) == 4 and lines[2].startswith("| 200 |") and lines[3].startswith("| 2000 |")
