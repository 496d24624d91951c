"""The settings reference the docs show is read off the settings' rows: it lists every setting
once, with its type, default, what its check allows and its meaning."""

from dataclasses import fields

from spex.shared.runtime.settings import ENV, RANGES, Settings
from spex.shared.runtime.settings_schema import reference


def _rows(table: str) -> dict[str, list[str]]:
    """Variable -> its row's cells (a cell's escaped `\\|` is text, not a border)."""
    lines = table.splitlines()
    assert (
        lines[0] == "| Variable | Type | Default | Allowed | Meaning |"
        and lines[1] == "|---|---|---|---|---|"
    )
    rows = {}
    for line in lines[2:]:
        cells = [c.strip().replace("\0", "|") for c in line.replace("\\|", "\0").strip("|").split("|")]
        assert len(cells) == 5, line
        assert cells[0] not in rows, cells[0]
        rows[cells[0]] = cells[1:]
    return rows


def test_the_reference_lists_every_setting_once_in_declaration_order():
    rows = _rows(reference(Settings))
    assert list(rows) == [f"`{name}`" for name in ENV]
    assert len(rows) == len(fields(Settings))


def test_each_row_says_the_type_default_allowed_values_and_meaning():
    rows = _rows(reference(Settings))
    for name, (field, meaning) in ENV.items():
        kind, default, allowed, help_text = rows[f"`{name}`"]
        assert help_text == meaning
        assert allowed == RANGES.get(field, "")
    assert rows["`SPEX_HEARTBEAT_S`"] == [
        "float",
        "`1.0`",
        "0.01 to 600",
        "heartbeat period of long jobs, seconds",
    ]
    assert rows["`SPEX_TREE_EVENTS`"][:2] == ["flag (1 or 0)", "`1`"]
    assert rows["`SPEX_OBJECTIVE`"][:2] == ["slo or throughput", "`slo`"]
    assert rows["`SPEX_PRM`"][1] == "(empty)"
    assert rows["`SPEX_LOG_LEVEL`"][3] == "debug | info | warning | error"  # its pipes escaped
