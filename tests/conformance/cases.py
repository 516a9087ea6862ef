"""Loading the reference-derived conformance cases (../shared/conformance; FORMAT.md).

The directory comes from ``CODER_CONFORMANCE_DIR`` (default ``../shared/conformance`` beside
the project root). Every ``<kind>-*.json`` file found there becomes one test, so new case
files are picked up without code changes.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CASE_DIR = pathlib.Path(
    os.environ.get("CODER_CONFORMANCE_DIR", str(ROOT.parent / "shared" / "conformance"))
)


def case_files(kind: str) -> list[pathlib.Path]:
    if not CASE_DIR.is_dir():
        return []
    return sorted(CASE_DIR.glob(f"{kind}-*.json"))


def load(path: pathlib.Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def cases(kind: str) -> list[Any]:
    """``pytest.param`` per case file of ``kind`` (id = the file stem)."""
    files = case_files(kind)
    if not files:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"no {kind} cases in {CASE_DIR}"))]
    return [pytest.param(p, id=p.stem) for p in files]


def rewrite_prefix(path: str) -> str:
    """D25: compare request paths modulo the chat prefix."""
    return path.replace("/api/v2/chats", "/api/experimental/chats")
