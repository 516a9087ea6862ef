"""The code blocks of the README and the documentation pages, as the example tests run them.

A fenced block is an example when its language is ``python`` (run with Python) or ``sh``,
``shell``, ``bash`` or ``console`` and it runs ``coder-agent`` (run with bash; in a
``console`` block only the lines after a ``$ `` prompt are commands). An HTML comment on the
line before the fence (blank lines between are allowed) changes what happens to it:

``<!-- example: continues -->``
    the block is appended to the page's previous Python example: they run as one program,
    in one process, so the block uses the names the earlier one defined;
``<!-- example: needs-deployment -->``
    the block needs something the tests do not start for it (a Coder deployment with real
    credentials, a PostgreSQL server, a queue): a Python block is compiled and type-checked
    with mypy instead, a shell block is not run;
``<!-- example: runs-in-ci -->``
    a shell block of commands that ``.ci/run`` runs itself (the README's install and test
    commands): each line either stands in ``.ci/run`` as written, or ends in a ``coder-agent``
    command, which runs here (the installing commands before it are left to CI);
``<!-- example: serves -->``
    a shell block whose command serves until interrupted (``coder-agent fake-server``): it is
    started, must print ``CODER_URL=`` and keep running, then is stopped with SIGINT;
``<!-- example: pytest -->``
    a Python block that is a test module: written to ``test_<line>.py`` and run with pytest;
``<!-- example: file NAME -->``
    the block (of any language) is written to ``NAME`` in the working directory of the page's
    examples before they run, so a later example can read or import it (a Python block marked
    so is not run by itself).

Everything else runs as it is written: a Python block (with the blocks continuing it) is saved
as a file and run with ``python FILE`` in a fresh process, so it must be a module a reader can
run the same way: an ``async`` example defines a coroutine and runs it with ``asyncio.run`` (or
``trio.run``), never a top-level ``await``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SHELL_LANGUAGES = frozenset({"sh", "shell", "bash", "console"})
MARKERS = frozenset({"continues", "needs-deployment", "runs-in-ci", "serves", "pytest", "file"})

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)\s*(?P<info>[\w+-]*)[^\n]*$")
_CODER_AGENT = re.compile(r"(?:^|[\s/;&|(])coder-agent(?=\s|$)", re.M)
_MARKER = re.compile(r"^\s*<!--\s*example:\s*(?P<marker>[\w-]+)(?:\s+(?P<arg>\S+))?\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its text and its marker."""

    page: str  # relative to the repository root
    line: int  # the line of the opening fence, counted from 1
    language: str
    text: str
    marker: str | None = None
    argument: str | None = None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def is_shell_example(self) -> bool:
        return self.language in SHELL_LANGUAGES and bool(_CODER_AGENT.search(self.commands()))

    def commands(self) -> str:
        """The text bash runs: the whole block, or a console block's prompted lines."""
        if self.language != "console":
            return self.text
        lines = []
        for line in self.text.splitlines():
            if line.startswith("$ "):
                lines.append(line[2:])
            elif lines and lines[-1].endswith("\\"):
                lines.append(line)
        return "\n".join(lines) + "\n"


@dataclass
class Program:
    """The Python blocks that run together in one process: a block and those continuing it."""

    blocks: list[Block] = field(default_factory=list)

    @property
    def first(self) -> Block:
        return self.blocks[0]

    def source(self) -> str:
        parts = []
        for block in self.blocks:
            parts.append(f"# --- {block.where}\n{block.text}")
        return "\n".join(parts)


def pages() -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks_of(path: Path, page: str | None = None) -> list[Block]:
    """The fenced blocks of one page, with the marker written before each."""
    page = page or path.relative_to(ROOT).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    marker: tuple[str, str | None] | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _MARKER.match(line)
        if m:
            name = m.group("marker")
            if name not in MARKERS:
                raise ValueError(f"{page}:{i + 1}: unknown example marker {name!r}")
            marker = (name, m.group("arg"))
            i += 1
            continue
        fence = _FENCE.match(line)
        if fence:
            indent, ticks = len(fence.group("indent")), fence.group("fence")
            body: list[str] = []
            j = i + 1
            while j < len(lines) and not (
                lines[j].strip().startswith(ticks) and lines[j].strip().strip(ticks[0]) == ""
            ):
                body.append(lines[j][indent:] if lines[j][:indent].isspace() else lines[j])
                j += 1
            found.append(
                Block(
                    page=page,
                    line=i + 1,
                    language=fence.group("info").lower(),
                    text="\n".join(body) + "\n",
                    marker=marker[0] if marker else None,
                    argument=marker[1] if marker else None,
                )
            )
            marker = None
            i = j + 1
            continue
        if line.strip():
            marker = None
        i += 1
    return found


def python_programs(blocks: list[Block]) -> list[Program]:
    """A page's runnable Python blocks, grouped into the programs they form."""
    programs: list[Program] = []
    previous: Block | None = None
    for block in blocks:
        if block.language != "python":
            continue
        if block.marker == "continues":
            if previous is None or previous.marker in ("needs-deployment", "pytest", "file"):
                raise ValueError(f"{block.where}: 'continues' follows no runnable Python block")
            programs[-1].blocks.append(block)
        elif block.marker not in ("needs-deployment", "pytest", "file"):
            programs.append(Program([block]))
        previous = block
    return programs
