"""The test tree mirrors the packages (``docs/development.md`` "The tests"): no test module sits
directly in ``tests/``, and every folder that holds test modules is a package, so two folders
may each hold a module of the same name."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_test_module_sits_directly_in_tests() -> None:
    stray = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert stray == [], f"move these under the folder of the package they test: {stray}"


def test_every_folder_of_test_modules_is_a_package() -> None:
    folders = {p.parent for p in TESTS.rglob("test_*.py")}
    chains = {
        f for folder in folders for f in (folder, *folder.parents) if TESTS in (f, *f.parents)
    }
    missing = sorted(
        str(f.relative_to(TESTS.parent)) for f in chains if not (f / "__init__.py").is_file()
    )
    assert missing == [], f"folders of test modules without an __init__.py: {missing}"
