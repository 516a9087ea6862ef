"""The AI SDK's own client code (the npm package ``ai``, pinned in ``node/package.json`` and
``node/package-lock.json``), installed once per lock file into a cache directory with the
machine's Node.js and npm, and run by ``node/ui_stream.mjs``.

A missing ``node`` / ``npm`` or a failed install fails the tests that need it (never a skip):
CI installs Node.js and reaches the npm registry.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

NODE_DIR = Path(__file__).parent / "node"
#: The pinned version of the ``ai`` package the tests read our streams with.
AI_SDK_VERSION = json.loads((NODE_DIR / "package.json").read_text())["dependencies"]["ai"]

RunNode = Callable[[str, Any], Any]


def _cache_dir() -> Path:
    lock = (NODE_DIR / "package-lock.json").read_bytes()
    key = hashlib.sha256(lock).hexdigest()[:16]
    base = os.environ.get("CODER_AI_SDK_CACHE") or os.path.join(
        tempfile.gettempdir(), "coder-agents-ai-sdk"
    )
    return Path(base) / key


def _install() -> Path:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail(
            "Node.js and npm are needed to read the bridge's stream with the AI SDK's own code "
            "(install the nodejs and npm packages)",
            pytrace=False,
        )
    target = _cache_dir()
    marker = target / "node_modules" / "ai" / "package.json"
    if marker.exists() and json.loads(marker.read_text()).get("version") == AI_SDK_VERSION:
        return target
    target.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(NODE_DIR / name, target / name)
    done = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=target,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0 or not marker.exists():
        pytest.fail(
            f"npm could not install ai@{AI_SDK_VERSION} into {target}:\n"
            f"{done.stdout}\n{done.stderr}",
            pytrace=False,
        )
    return target


@pytest.fixture(scope="session")
def ai_sdk_node() -> RunNode:
    """``run(mode, payload)``: run ``ui_stream.mjs MODE`` on the JSON payload with the
    installed ``ai`` package and return its JSON output."""
    target = _install()
    script = target / "ui_stream.mjs"
    shutil.copyfile(NODE_DIR / "ui_stream.mjs", script)

    def run(mode: str, payload: Any) -> Any:
        done = subprocess.run(
            ["node", str(script), mode],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode != 0:
            raise AssertionError(f"node {mode} failed:\n{done.stdout}\n{done.stderr}")
        return json.loads(done.stdout)

    return run
