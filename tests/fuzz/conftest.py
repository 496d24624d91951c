"""The fuzz tests report how many cases each one ran."""

from tests.fuzz.harness import CASES, NOTES


def pytest_terminal_summary(terminalreporter):
    if not CASES:
        return
    terminalreporter.section("fuzz cases")
    for test, c in sorted(CASES.items()):
        terminalreporter.write_line(f"{test}: {c['examples']} examples, {c['entries']} fuzzed inputs")
        if test in NOTES:
            terminalreporter.write_line(f"    {NOTES[test]}")
