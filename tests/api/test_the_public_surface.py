"""`import spex` is the public API: every name it exports resolves and is documented, each
public function and class says what its arguments are, and importing `spex` (as every service
does, through `spex.proto` and the rest) loads none of the evaluation's or client's modules."""

import inspect
import subprocess
import sys

import spex


def test_every_exported_name_resolves_and_is_documented():
    assert sorted(spex.__all__) == spex.__all__ and set(spex.__all__) <= set(dir(spex))
    for name in spex.__all__:
        value = getattr(spex, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert inspect.getdoc(value), f"spex.{name} has no docstring"
            assert value.__module__.startswith("spex"), name
    for name in ("evaluate", "load_dataset"):
        doc = inspect.getdoc(getattr(spex, name))
        for parameter in inspect.signature(getattr(spex, name)).parameters:
            assert f"{parameter}:" in doc, f"spex.{name}'s docstring leaves out {parameter}"


def test_an_unknown_name_is_an_attribute_error():
    try:
        spex.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no attribute 'no_such_name'" in str(exc)
    else:
        raise AssertionError("spex.no_such_name resolved")


def test_importing_spex_or_a_service_s_modules_loads_no_evaluation_or_client():
    loaded = "('spex._', 'spex.bench', 'pandas', 'datasets')"
    probe = (
        "import sys, spex, spex.proto, spex.shared.runtime.settings; "
        f"print(sorted(m for m in sys.modules if m.startswith({loaded})))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
