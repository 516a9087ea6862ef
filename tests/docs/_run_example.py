"""Run one documentation example: ``python _run_example.py FILE``.

The file runs as the ``__main__`` module, compiled with top-level ``await`` allowed (and
without this file's ``__future__`` imports); an example that awaits at the top level (the way
the pages show ``async`` code) runs under ``asyncio.run``, any other one as a plain script.
The process's working directory is the example's own.
"""

import ast
import asyncio
import inspect
import sys
import types
from pathlib import Path


def main(path: str) -> None:
    source = Path(path).read_text(encoding="utf-8")
    code = compile(source, path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    module = types.ModuleType("__main__")
    module.__file__ = path
    sys.modules["__main__"] = module
    if code.co_flags & inspect.CO_COROUTINE:
        asyncio.run(eval(code, module.__dict__))
    else:
        exec(code, module.__dict__)


if __name__ == "__main__":
    main(sys.argv[1])
