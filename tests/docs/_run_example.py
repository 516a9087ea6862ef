"""Run one documentation example: ``python _run_example.py FILE``.

The file is compiled with top-level ``await`` allowed; an example that awaits at the top level
(the way the pages show ``async`` code) runs under ``asyncio.run``, any other one as a plain
module. The process's working directory is the example's own.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import sys
from pathlib import Path


def main(path: str) -> None:
    source = Path(path).read_text(encoding="utf-8")
    code = compile(source, path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    namespace: dict[str, object] = {"__name__": "__main__", "__file__": path}
    if code.co_flags & inspect.CO_COROUTINE:
        asyncio.run(eval(code, namespace))
    else:
        exec(code, namespace)


if __name__ == "__main__":
    main(sys.argv[1])
