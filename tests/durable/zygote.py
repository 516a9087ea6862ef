"""A pre-imported parent for the crash-matrix workflow processes: ``python -m
tests.durable.zygote``.

Importing the library takes longer than running a workflow against the fake server, so the
matrix starts one zygote per parallel lane. The zygote imports everything once (and starts no
thread, so forking it is safe), then for each line on stdin (a JSON object of environment
variables) forks a child that runs ``tests.durable.worker.main`` in a fresh event loop, with
its output sent to ``DURABLE_LOG``. The child is the workflow process the matrix kills: it
SIGKILLs itself at its crash point. The zygote answers each line with the child's exit code
(``-9`` for SIGKILL), as JSON on stdout.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import traceback

from . import worker


def _child(env: dict[str, str]) -> int:
    os.environ.update(env)
    log = os.open(env["DURABLE_LOG"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    try:
        asyncio.run(worker.main())
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def main() -> None:
    for line in sys.stdin:
        env = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _child(env)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"exit": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    main()
