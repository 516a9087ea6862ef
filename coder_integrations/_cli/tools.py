"""Client tools for ``coder-agent chat --tools SPEC`` (and ``run --tools``).

``SPEC`` names a Python module: a path to a ``.py`` file (``./tools.py``) or an importable
module name (``mypackage.tools``, found on ``sys.path``, which includes the current
directory). The tools are, in this order of preference:

* ``SPEC:NAME``: the module attribute ``NAME``, a list of tools or a name -> tool mapping;
* the module's ``TOOLS`` attribute, in the same forms;
* otherwise every module-level ``@tool``-decorated function (a ``coder_proto.Tool``).

A tool is anything ``CoderAgent(tools=...)`` takes: a ``@tool`` function, a ``Tool`` or a plain
function (its docstring is the description, its annotations the input schema). ``--tools``
may be repeated; a name given twice is a usage error.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ToolsError", "load_tools"]


class ToolsError(Exception):
    """``--tools`` names something that gives no tools (one line for the user)."""


def _module(spec: str) -> types.ModuleType:
    if spec.endswith(".py") or os.sep in spec or (os.altsep and os.altsep in spec):
        path = os.path.abspath(spec)
        if not os.path.isfile(path):
            raise ToolsError(f"--tools {spec}: no such file")
        name = "coder_agent_tools_" + os.path.splitext(os.path.basename(path))[0]
        loader_spec = importlib.util.spec_from_file_location(name, path)
        assert loader_spec is not None
        assert loader_spec.loader is not None
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[name] = module
        try:
            loader_spec.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(name, None)
            raise ToolsError(f"--tools {spec}: importing it failed: {type(exc).__name__}: {exc}")
        return module
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(spec)
    except ModuleNotFoundError as exc:
        if exc.name and spec.startswith(exc.name):
            raise ToolsError(
                f"--tools {spec}: no module named {exc.name!r} (give a module name or a .py path)"
            ) from None
        raise ToolsError(f"--tools {spec}: importing it failed: {exc}") from None
    except Exception as exc:
        raise ToolsError(f"--tools {spec}: importing it failed: {type(exc).__name__}: {exc}")


def _named(value: Any, spec: str) -> dict[str, Any]:
    from coder_proto import Tool

    def name_of(item: Any) -> str:
        if isinstance(item, Tool):
            return item.name
        name = getattr(item, "__name__", None)
        if not callable(item) or not isinstance(name, str):
            raise ToolsError(f"--tools {spec}: {item!r} is not a tool (a function or a Tool)")
        return name

    if isinstance(value, Mapping):
        return {str(k): v for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return {name_of(item): item for item in value}
    raise ToolsError(f"--tools {spec}: expected a list of tools or a name -> tool mapping")


def load_tools(specs: Sequence[str]) -> dict[str, Any]:
    """The tools of every ``--tools SPEC``, by name; ``ToolsError`` for a spec that gives
    none, cannot be imported, or repeats a name."""
    from coder_proto import Tool

    tools: dict[str, Any] = {}
    for spec in specs:
        path, _, attribute = spec.rpartition(":")
        if not path or not attribute.isidentifier():
            path, attribute = spec, ""
        module = _module(path)
        if attribute:
            if not hasattr(module, attribute):
                raise ToolsError(f"--tools {spec}: {path} has no attribute {attribute!r}")
            found = _named(getattr(module, attribute), spec)
        elif hasattr(module, "TOOLS"):
            found = _named(module.TOOLS, spec)
        else:
            found = {v.name: v for v in vars(module).values() if isinstance(v, Tool)}
        if not found:
            raise ToolsError(
                f"--tools {spec}: defines no tools (decorate functions with @tool or list "
                "them in TOOLS)"
            )
        for name in found:
            if name in tools:
                raise ToolsError(f"--tools {spec}: the tool {name!r} is defined twice")
        tools.update(found)
    return tools
