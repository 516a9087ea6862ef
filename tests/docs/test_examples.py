"""Every code example of the README and the documentation pages runs.

Every Python block, with the blocks that continue it, is a program a reader can save as a file
and run: it compiles as a module (no top-level ``await``; an ``async`` example says
``asyncio.run`` itself) and runs with ``python FILE``. The programs run in a process of their
own against a fake Coder server started here:
``CODER_URL``, ``CODER_SESSION_TOKEN`` and ``CODER_ORGANIZATION_ID`` point at it, so an example
written for a deployment runs unchanged. Shell examples that run ``coder-agent`` run with
bash, the same way. Examples marked as needing a deployment are compiled and type-checked
instead. Each page's examples share a working directory (a fresh temporary one per page,
holding a small ``report.pdf`` and the blocks marked ``file``); the markers are described in
``tests/docs/_blocks.py`` and docs/development.md.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_integrations.pytest_plugin import FAST_FAKE

from ._blocks import ROOT, Block, Program, blocks_of, pages, python_programs

#: One example's bound: far above what any takes, there so that a hang fails instead of stalling.
EXAMPLE_TIMEOUT = 120.0
#: A small document for the examples that attach ``report.pdf``.
SAMPLE_PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"

BLOCKS: dict[str, list[Block]] = {
    page.relative_to(ROOT).as_posix(): blocks_of(page) for page in pages()
}
PROGRAMS: list[Program] = [p for blocks in BLOCKS.values() for p in python_programs(blocks)]
COMPILED_ONLY: list[Block] = [
    b
    for blocks in BLOCKS.values()
    for b in blocks
    if b.language == "python" and b.marker == "needs-deployment"
]
SHELL: list[Block] = [
    b
    for blocks in BLOCKS.values()
    for b in blocks
    if b.is_shell_example and b.marker not in ("needs-deployment", "runs-in-ci", "serves")
]
SERVES: list[Block] = [b for blocks in BLOCKS.values() for b in blocks if b.marker == "serves"]
IN_CI: list[Block] = [b for blocks in BLOCKS.values() for b in blocks if b.marker == "runs-in-ci"]
PYTEST: list[Block] = [b for blocks in BLOCKS.values() for b in blocks if b.marker == "pytest"]
#: Every Python text a reader may save as a file: the programs, and the blocks that are not run
#: as programs (compiled and type-checked, written as a module, or run by pytest).
AS_FILES: list[tuple[str, str]] = [(p.first.where, p.source()) for p in PROGRAMS] + [
    (b.where, b.text)
    for blocks in BLOCKS.values()
    for b in blocks
    if b.language == "python" and b.marker in ("needs-deployment", "file", "pytest")
]


@pytest.fixture(scope="module")
def deployment() -> Iterator[dict[str, str]]:
    """The fake Coder server every example talks to, as the environment names it."""
    with FakeCoderServer(**FAST_FAKE) as server:
        yield {
            "CODER_URL": server.url,
            "CODER_SESSION_TOKEN": server.token,
            "CODER_ORGANIZATION_ID": server.organization_id,
        }


@pytest.fixture(scope="module")
def workdirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One working directory per page: the sample files and the page's ``file`` blocks."""
    dirs: dict[str, Path] = {}
    for page, blocks in BLOCKS.items():
        path = tmp_path_factory.mktemp("example")
        (path / "report.pdf").write_bytes(SAMPLE_PDF)
        # `.venv/bin/coder-agent` in a shell example is the running interpreter's environment.
        (path / ".venv").symlink_to(sys.prefix, target_is_directory=True)
        for block in blocks:
            if block.marker == "file":
                assert block.argument, f"{block.where}: 'file' needs a file name"
                (path / block.argument).parent.mkdir(parents=True, exist_ok=True)
                (path / block.argument).write_text(block.text, encoding="utf-8")
        dirs[page] = path
    return dirs


def _environment(deployment: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODER_")}
    env.update(deployment)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _run(argv: list[str], cwd: Path, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """Run one example, killing its whole process group if it outlives its bound."""
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=EXAMPLE_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"the example ran longer than {EXAMPLE_TIMEOUT:.0f} s\n{out}\n{err}")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _report(result: subprocess.CompletedProcess[str], source: str) -> str:
    return (
        f"exit status {result.returncode}\n--- example\n{source}\n--- stdout\n{result.stdout}"
        f"\n--- stderr\n{result.stderr}"
    )


@pytest.mark.timeout(EXAMPLE_TIMEOUT + 60)
@pytest.mark.parametrize("program", PROGRAMS, ids=[p.first.where for p in PROGRAMS])
def test_python_example_runs(
    program: Program, deployment: dict[str, str], workdirs: dict[str, Path]
) -> None:
    cwd = workdirs[program.first.page]
    script = cwd / f"example_{program.first.line}.py"
    source = program.source()
    script.write_text(source, encoding="utf-8")
    result = _run([sys.executable, script.name], cwd, _environment(deployment))
    assert result.returncode == 0, _report(result, source)


@pytest.mark.parametrize(("where", "source"), AS_FILES, ids=[w for w, _ in AS_FILES])
def test_python_example_compiles_as_a_file(where: str, source: str) -> None:
    """Saved as a file, the example is a module: a top-level ``await`` would not compile."""
    compile(source, where, "exec", dont_inherit=True)


def test_a_top_level_await_does_not_compile_as_a_file() -> None:
    with pytest.raises(SyntaxError):
        compile("import asyncio\nawait asyncio.sleep(0)\n", "example.py", "exec", dont_inherit=True)


@pytest.mark.timeout(EXAMPLE_TIMEOUT + 60)
def test_deployment_examples_type_check(tmp_path: Path) -> None:
    """The examples that cannot run are type-checked against the library instead.

    Names the example leaves to the reader (``payments``, a database pool) are not errors.
    """
    files = []
    for i, block in enumerate(COMPILED_ONLY):
        path = tmp_path / f"example_{i}.py"
        path.write_text(f"# {block.where}\n{block.text}", encoding="utf-8")
        files.append(path.name)
    argv = [sys.executable, "-m", "mypy", "--ignore-missing-imports", "--follow-imports=silent"]
    argv += ["--disable-error-code=name-defined"]
    argv += ["--cache-dir", str(tmp_path / ".mypy_cache"), "--no-error-summary", *files]
    result = _run(argv, tmp_path, dict(os.environ))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.timeout(EXAMPLE_TIMEOUT + 60)
@pytest.mark.parametrize("block", SHELL, ids=[b.where for b in SHELL])
def test_shell_example_runs(
    block: Block, deployment: dict[str, str], workdirs: dict[str, Path]
) -> None:
    script = block.commands()
    result = _run(
        ["bash", "-euo", "pipefail", "-c", script],
        workdirs[block.page],
        _environment(deployment),
    )
    assert result.returncode == 0, _report(result, script)


@pytest.mark.timeout(EXAMPLE_TIMEOUT + 60)
@pytest.mark.parametrize("block", IN_CI, ids=[b.where for b in IN_CI])
def test_ci_example_is_what_ci_runs(
    block: Block, deployment: dict[str, str], workdirs: dict[str, Path]
) -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    for line in block.text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        command = line.split("&&")[-1].strip()
        if "coder-agent" in command:
            result = _run(["bash", "-c", command], workdirs[block.page], _environment({}))
            assert result.returncode == 0, _report(result, command)
        else:
            assert line.strip() in ci, f"{block.where}: .ci/run does not run {line.strip()!r}"


@pytest.mark.timeout(EXAMPLE_TIMEOUT + 60)
@pytest.mark.parametrize("block", PYTEST, ids=[b.where for b in PYTEST])
def test_pytest_example_passes(
    block: Block, deployment: dict[str, str], workdirs: dict[str, Path]
) -> None:
    cwd = workdirs[block.page]
    module = cwd / f"test_example_{block.line}.py"
    module.write_text(block.text, encoding="utf-8")
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", module.name]
    result = _run(argv, cwd, _environment(deployment))
    assert result.returncode == 0, _report(result, block.text)


@pytest.mark.timeout(EXAMPLE_TIMEOUT + 60)
@pytest.mark.parametrize("block", SERVES, ids=[b.where for b in SERVES])
def test_serving_example_serves(block: Block, workdirs: dict[str, Path]) -> None:
    script = block.commands()
    proc = subprocess.Popen(
        ["bash", "-c", script],
        cwd=workdirs[block.page],
        env=_environment({}),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    seen: list[str] = []
    timer = threading.Timer(EXAMPLE_TIMEOUT, os.killpg, (proc.pid, signal.SIGKILL))
    timer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("CODER_URL="):
                break
        assert proc.poll() is None, "".join(seen)
        assert seen and seen[-1].startswith("CODER_URL="), "".join(seen)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.communicate(timeout=30)
        finally:
            timer.cancel()
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def test_the_examples_are_found() -> None:
    """The harness sees the README's examples (a broken parser would silently run none)."""
    readme = BLOCKS["README.md"]
    assert any(b.language == "python" for b in readme)
    assert any(b.is_shell_example for b in readme)
    assert len(PROGRAMS) >= 20
    assert len(SHELL) >= 3


def test_a_marker_applies_to_the_next_block_only(tmp_path: Path) -> None:
    text = (
        "<!-- example: needs-deployment -->\n\n```python\nx = 1\n```\n\n"
        "Some prose.\n\n```python\ny = 2\n```\n<!-- example: continues -->\n```python\nz = y\n```\n"
        "<!-- example: file book.json -->\n```json\n{}\n```\n"
        "```console\n$ coder-agent demo\nsome output\n$ coder-agent run \\\n  --fake hi\n```\n"
    )
    page = tmp_path / "sample.md"
    page.write_text(text, encoding="utf-8")
    blocks = blocks_of(page, "sample.md")
    assert [(b.language, b.marker) for b in blocks] == [
        ("python", "needs-deployment"),
        ("python", None),
        ("python", "continues"),
        ("json", "file"),
        ("console", None),
    ]
    assert blocks[3].argument == "book.json"
    programs = python_programs(blocks)
    assert [[b.text for b in p.blocks] for p in programs] == [["y = 2\n", "z = y\n"]]
    assert blocks[4].commands() == "coder-agent demo\ncoder-agent run \\\n  --fake hi\n"
