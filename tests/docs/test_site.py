"""The documentation site builds in MkDocs' strict mode, and its API reference covers every
public name with a docstring.

The strict build fails on a broken link or anchor, a page missing from the navigation, and a
reference mkdocstrings cannot resolve (docs/site/mkdocs.yml). Beyond it, every public name of
the surfaces below must have a docstring of its own and a heading in the API reference pages
(``docs/reference/``): a new export without either fails here.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import griffe
import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "docs" / "site" / "mkdocs.yml"
BUILD_TIMEOUT = 600.0

#: The public surfaces: each module's ``__all__`` is what a user may import from it.
SURFACES = (
    "coder_proto",
    "coder_proto.durable",
    "coder_proto.transcript",
    "coder_proto.fake",
    "coder_proto.adapter",
    "coder_io_asyncio",
    "coder_io_trio",
    "coder_io_sync",
    "coder_io_common.stores",
    "coder_integrations.fake_server",
    "coder_integrations.ai_sdk",
    "coder_integrations.pytest_plugin",
    "coder_io_asyncio.temporal",
    "coder_io_asyncio.integrations.openai_agents",
    "coder_integrations.otel",
    "coder_io_asyncio.integrations.pydantic_ai",
    "coder_io_sync.integrations.llm",
    "coder_io_asyncio.integrations.langchain",
)
PACKAGES = (
    "coder_proto",
    "coder_io_common",
    "coder_io_asyncio",
    "coder_io_trio",
    "coder_io_sync",
    "coder_integrations",
)


def public_names() -> Iterator[tuple[str, str]]:
    for surface in SURFACES:
        for name in importlib.import_module(surface).__all__:
            yield surface, name


def reference_id(surface: str, name: str) -> str:
    """The anchor the API reference gives a public name.

    An adapter re-exports the core's names and the SQLite store unchanged; their reference is
    the core's page (``coder_proto.X``) and the stores' page.
    """
    if surface in ("coder_io_asyncio", "coder_io_trio", "coder_io_sync"):
        obj = getattr(importlib.import_module(surface), name)
        core = importlib.import_module("coder_proto")
        if name in core.__all__ and getattr(core, name) is obj:
            return f"coder_proto.{name}"
        stores = importlib.import_module("coder_io_common.stores")
        if name in stores.__all__ and getattr(stores, name) is obj:
            return f"coder_io_common.stores.{name}"
    return f"{surface}.{name}"


@cache
def _static() -> griffe.ModulesCollection:
    """The packages as griffe reads their source: where the docstrings of constants live."""
    loader = griffe.GriffeLoader(search_paths=[str(ROOT)])
    for package in PACKAGES:
        loader.load(package)
    loader.resolve_aliases(implicit=True, external=False)
    return loader.modules_collection


def docstring(surface: str, name: str) -> str:
    """A public name's own docstring ("" when it has none).

    Classes, functions and modules carry theirs at run time (a class's own, not one it
    inherits); a constant or a type alias has the string literal written after it.
    """
    obj: Any = getattr(importlib.import_module(surface), name)
    if inspect.isclass(obj):
        return str(vars(obj).get("__doc__") or "")
    if inspect.isroutine(obj) or inspect.ismodule(obj):
        return str(obj.__doc__ or "")
    # Where the name is defined: an adapter's re-export of a core or store name is read at
    # its source (the packages import those names on first use, out of a static reader's sight).
    member = _static().get_member(reference_id(surface, name))
    return member.docstring.value if member.docstring else ""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built strict into a temporary directory."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(CONFIG), "-d", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr}"
    return out


@pytest.fixture(scope="module")
def reference_ids(site: Path) -> frozenset[str]:
    ids: set[str] = set()
    for page in (site / "reference").glob("*.html"):
        ids.update(re.findall(r'\bid="([\w.]+)"', page.read_text(encoding="utf-8")))
    return frozenset(ids)


@pytest.mark.timeout(BUILD_TIMEOUT + 60)
def test_the_site_builds_strict(site: Path) -> None:
    assert (site / "index.html").is_file()
    assert (site / "reference" / "core.html").is_file()


@pytest.mark.timeout(BUILD_TIMEOUT + 60)
def test_every_public_name_is_in_the_api_reference(reference_ids: frozenset[str]) -> None:
    missing = [
        f"{surface}.{name} (#{reference_id(surface, name)})"
        for surface, name in public_names()
        if reference_id(surface, name) not in reference_ids
    ]
    assert missing == [], "public names missing from docs/reference/: " + ", ".join(missing)


def test_every_public_name_has_a_docstring() -> None:
    bare = [f"{s}.{n}" for s, n in public_names() if not docstring(s, n).strip()]
    assert bare == [], "public names without a docstring: " + ", ".join(bare)


def test_every_surface_is_documented_on_a_reference_page() -> None:
    pages = "\n".join(p.read_text("utf-8") for p in (ROOT / "docs" / "reference").glob("*.md"))
    directives = set(re.findall(r"^::: ([\w.]+)\s*$", pages, re.M))
    assert set(SURFACES) <= directives


def test_the_readme_links_resolve() -> None:
    """The README lives outside the site; its relative links must still lead somewhere."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\((?!https?://|#)([^)#\s]+)(?:#[^)]*)?\)", text)
    assert targets, "the README links no page"
    broken = [t for t in targets if not (ROOT / t).exists()]
    assert broken == []
