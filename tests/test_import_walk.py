"""conformance/tools/import_walk.py: every module under a package imported, each failure named."""

import pytest

from conformance.tools import import_walk


@pytest.fixture
def package(tmp_path, monkeypatch):
    """walked_pkg: two good modules, a subpackage with one that needs a package left out and one that exits."""
    root = tmp_path / "walked_pkg"
    (root / "sub").mkdir(parents=True)
    for path, text in {"__init__.py": "", "good.py": "import json\n", "sub/__init__.py": "",
                       "sub/needs_left_out.py": "import dill_left_out_of_the_bundle\n",
                       "sub/exits.py": "raise SystemExit('no GPU here')\n"}.items():
        (root / path).write_text(text)
    (tmp_path / "single_module.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "walked_pkg"
    import sys
    for name in [m for m in sys.modules if m.startswith("walked_pkg") or m == "single_module"]:
        del sys.modules[name]


def test_every_module_under_a_package_is_imported_and_each_failure_named(package):
    imported, failed = import_walk.walk([package], ["single_module"])
    assert imported == 4  # walked_pkg, good, sub and the single module
    assert failed == {"walked_pkg.sub.exits": "SystemExit: no GPU here",
                      "walked_pkg.sub.needs_left_out": "ModuleNotFoundError: No module named 'dill_left_out_of_the_bundle'"}


def test_the_command_prints_the_failures_and_exits_1(package, capsys):
    assert import_walk.main([package]) == 1
    out = capsys.readouterr().out
    assert "FAILED walked_pkg.sub.needs_left_out: ModuleNotFoundError" in out
    assert out.rstrip().endswith("import_walk: 3 modules imported, 2 failed")
    assert import_walk.main(["--module", "single_module"]) == 0
