"""A program imports what it uses when it uses it: ``coder-agent --version`` and ``--help``
load no protocol code, and importing an adapter loads neither the fake server, the durable
stores, transcripts nor the integrations, and an adapter loads httpx with its first
client rather than on import (each checked in a fresh interpreter's
``sys.modules``; what importing costs is measured by ``python -m tests.bench --only imports``).
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

#: Modules of the core that only a program using them should pay for: durable workflows (and
#: the store calls the connection performs for them), transcripts, the fake server, the
#: integrations, and the REST jobs and chat extras (edits, model hints, workspaces) that a
#: program loads with the first call using them.
ON_FIRST_USE = (
    "coder_proto.fake",
    "coder_proto.transcript",
    "coder_integrations.fake_server",
    "coder_io_common.stores.sqlite",
    "coder_io_common.stores.postgres",
    "coder_integrations.otel",
    "coder_io_common.instrumentation",
    "coder_integrations.ai_sdk",
    "coder_integrations.pytest_plugin",
    "coder_io_asyncio.temporal",
    "coder_io_asyncio.durable",
    "coder_io_trio.durable",
    "coder_io_sync.durable",
    "coder_io_common._async.durable",
    "coder_proto.durable",
    "coder_proto._agent.history",
    "coder_proto._rest.chat_extras",
    "coder_proto._rest.model_hints",
    "coder_proto._rest.workspaces",
    "coder_proto._jobs.operations",
    "opentelemetry",
    "temporalio",
    "jsonschema",
    "sqlite3",
    "psycopg",
)

#: What a program loads when it first uses tools (``tool``, an agent given tools) or structured
#: output (``output_type``): an agent without them does not pay for them.
ON_FIRST_TOOL = ("coder_proto._agent.tools", "coder_proto._agent.structured_output")

#: What an adapter loads when its first client (or agent) is made, not when it is imported: a
#: program that imports the library and never connects does not pay for them.
ON_FIRST_CLIENT = ("httpx", "httpcore", "h11")

#: What the core loads when it makes its first WebSocket connection (a turn's stream, the
#: watch), not when it is imported.
ON_FIRST_STREAM = ("wsproto",)

#: What ``--version`` and ``--help`` may load of the library besides the command line itself
#: (``coder_integrations.cli`` and its ``_cli`` modules): the package ``__init__``s it sits in
#: and reads names from (their names resolve on first use), the version, and the fake server's
#: flags, which ``fake-server --help`` lists.
CLI_ALLOWED = {
    "coder_proto",
    "coder_proto._lazy",
    "coder_proto._runtime_names",
    "coder_proto._version",
    "coder_proto.adapter",
    "coder_integrations",
    "coder_integrations.fake_server",
    "coder_integrations.fake_server._flags",
}

#: What importing ``coder_io_sync`` loads of the library: the package ``__init__``s its names
#: resolve from on first use, and the version.
SYNC_ON_IMPORT = {
    "coder_io_sync",
    "coder_proto",
    "coder_proto._lazy",
    "coder_proto._runtime_names",
    "coder_proto._version",
    "coder_proto.adapter",
    "coder_io_common",
    "coder_io_common.stores",
}


def _modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code`` and not before it: what
    the interpreter loads on its own (site, and coverage's measurement of child processes in
    a covered run, which imports ``sqlite3``) does not count."""
    return _sys_modules(code) - _sys_modules("pass")


@functools.cache
def _sys_modules(code: str) -> set[str]:
    """The ``sys.modules`` of a fresh interpreter after running ``code``."""
    script = (
        f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)), file=sys.__stderr__)"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return set(json.loads(proc.stderr.strip().splitlines()[-1]))


def _library(modules: set[str]) -> set[str]:
    return {
        m
        for m in modules
        if m.split(".")[0].startswith(("coder_proto", "coder_io_", "coder_integrations"))
    }


@pytest.mark.parametrize("flag", ["--version", "--help"])
def test_the_command_line_answers_version_and_help_without_protocol_code(flag: str) -> None:
    code = (
        f"import sys\nsys.argv = ['coder-agent', {flag!r}]\n"
        "from coder_integrations.cli import main\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert exc.code == 0, exc.code"
    )
    modules = _modules_after(code)
    loaded = _library(modules) - CLI_ALLOWED
    assert {m for m in loaded if not m.startswith("coder_integrations._cli")} == {
        "coder_integrations.cli"
    }
    assert not {"httpx", "attrs", "wsproto", "asyncio", "trio"} & modules


@pytest.mark.parametrize("adapter", ["coder_io_asyncio", "coder_io_trio"])
def test_importing_an_adapter_leaves_the_optional_parts_unloaded(adapter: str) -> None:
    modules = _modules_after(f"import {adapter}")
    assert f"{adapter}.agent" in modules  # the agent itself is there
    loaded = {m for m in ON_FIRST_USE if any(n == m or n.startswith(m + ".") for n in modules)}
    assert loaded == set()
    assert not set(ON_FIRST_TOOL) & modules
    assert "pickle" not in modules  # imported by an error being pickled


@pytest.mark.parametrize("adapter", ["coder_io_asyncio", "coder_io_trio", "coder_io_sync"])
def test_making_a_client_and_an_agent_leaves_the_optional_parts_unloaded(adapter: str) -> None:
    made = (
        f"from {adapter} import CoderAgent, CoderChatClient\n"
        "CoderChatClient(base_url='http://127.0.0.1:9', token='t')\n"
        "CoderAgent(base_url='http://127.0.0.1:9', token='t')"
    )
    modules = _modules_after(made)
    loaded = {m for m in ON_FIRST_USE if any(n == m or n.startswith(m + ".") for n in modules)}
    assert loaded == set()
    assert not set(ON_FIRST_TOOL) & modules
    assert "coder_proto._agent.tools" in _modules_after(f"{made}\nfrom {adapter} import tool")


@pytest.mark.parametrize("adapter", ["coder_io_asyncio", "coder_io_trio", "coder_io_sync"])
def test_an_adapter_loads_httpx_with_its_first_client(adapter: str) -> None:
    imported = f"from {adapter} import CoderAgent, CoderChatClient, tool"
    assert not set(ON_FIRST_CLIENT) & _modules_after(imported)
    made = f"{imported}\nCoderChatClient(base_url='http://127.0.0.1:9', token='t')"
    assert set(ON_FIRST_CLIENT) <= _modules_after(made)
    made = f"{imported}\nCoderAgent(base_url='http://127.0.0.1:9', token='t')"
    assert set(ON_FIRST_CLIENT) <= _modules_after(made)


@pytest.mark.parametrize("adapter", ["coder_io_asyncio", "coder_io_trio", "coder_io_sync"])
def test_an_adapter_loads_wsproto_with_its_first_websocket(adapter: str) -> None:
    made = f"from {adapter} import CoderAgent\nCoderAgent(base_url='http://127.0.0.1:9', token='t')"
    assert not set(ON_FIRST_STREAM) & _modules_after(made)
    dialed = (
        "from coder_proto._stream.websocket import WebSocketClient\n"
        "WebSocketClient('ws://127.0.0.1:9/api/experimental/chats/watch', token='t')"
    )
    assert set(ON_FIRST_STREAM) <= _modules_after(dialed)


def test_the_blocking_adapter_loads_its_names_on_first_use() -> None:
    """Importing ``coder_io_sync`` loads the tables its names resolve from and nothing of the
    protocol (every name is imported on first use); its agent brings the same as an
    event-loop adapter's, no more."""
    assert _library(_modules_after("import coder_io_sync")) <= SYNC_ON_IMPORT
    modules = _modules_after("from coder_io_sync import CoderAgent, CoderChatClient, tool")
    loaded = {m for m in ON_FIRST_USE if any(n == m or n.startswith(m + ".") for n in modules)}
    assert loaded == set()


@pytest.mark.parametrize("adapter", ["coder_io_asyncio", "coder_io_trio"])
def test_an_adapter_gives_the_cores_names_as_a_star_import_of_it_would(adapter: str) -> None:
    """The core's names are looked up on first use, all of ``coder_proto.__all__`` (the
    embedder's too, though only ``USER_NAMES`` are in the adapter's ``__all__``), each the
    core's own object."""
    import importlib

    import coder_proto

    module = importlib.import_module(adapter)
    assert set(coder_proto.__all__) <= set(dir(module))
    for name in coder_proto.__all__:
        assert getattr(module, name) is getattr(coder_proto, name), name
    assert "coder_proto.durable._tools" in _modules_after(f"from {adapter} import crash_safe")


def test_the_adapter_module_loads_its_names_on_first_use() -> None:
    """``coder_proto.adapter`` lists where each of its names is defined; importing it loads
    none of them, so an adapter importing its names from it pays what it paid importing them
    from their modules."""
    assert _library(_modules_after("import coder_proto.adapter")) <= {
        "coder_proto",
        "coder_proto._lazy",
        "coder_proto._runtime_names",
        "coder_proto.adapter",
    }
    modules = _modules_after("from coder_proto.adapter import run_program")
    assert "coder_proto.durable._tools" in modules
    assert "coder_proto._shells.agent_shell" not in modules


@pytest.mark.parametrize(
    ("code", "module"),
    [
        ("from coder_io_asyncio import SQLiteStore", "coder_io_common.stores.sqlite"),
        ("from coder_io_asyncio import run_turn", "coder_io_asyncio.durable"),
        ("from coder_io_trio import instrument", "coder_io_common.instrumentation"),
        ("from coder_io_sync import sweep_orphans", "coder_io_sync.durable"),
        ("from coder_proto.transcript import replay", "coder_proto.transcript._replay"),
        ("from coder_io_asyncio import UIMessage", "coder_proto._agent.history"),
        (
            "from coder_integrations.fake_server import FakeCoderServer",
            "coder_integrations.fake_server._server",
        ),
    ],
)
def test_a_part_is_imported_when_a_name_of_it_is_used(code: str, module: str) -> None:
    assert module in _modules_after(code)


@pytest.mark.parametrize(
    "package",
    [
        "coder_proto",
        "coder_proto.durable",
        "coder_proto.transcript",
        "coder_proto.adapter",
        "coder_io_sync",
        "coder_io_asyncio",
        "coder_io_trio",
        "coder_io_common.stores",
        "coder_integrations.fake_server",
    ],
)
def test_names_imported_on_first_use_are_listed_and_unknown_names_are_errors(package: str) -> None:
    import importlib

    module = importlib.import_module(package)
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'no_such_name'"):
        module.no_such_name  # noqa: B018
