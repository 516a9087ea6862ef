"""Every rule label the sources cite resolves to a page and an anchor under ``docs/``.

Docstrings and comments name the rule they implement (``D22``, ``C.3``, ``wire 1.4``,
``server-behaviour 2.2``, ``docs/durable-workflows.md "Shape each step"``); ``docs/README.md``
lists the label forms and the page each one points at. This module reads the prose of every
Python source (comments, strings except bytes, and ``test_`` function names), finds the labels
and checks each against the anchors of its page, so a typo (``D99``, ``C.9``, ``wire 13``) or a
section that moved fails here. It also fails on references to documents that are not in the
repository, and on a rule label in text the library shows its users (exception messages, log
lines, CLI help).
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import subprocess
import sys
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from xml.etree import ElementTree

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE_DIRS = (
    "coder_proto",
    "coder_io_common",
    "coder_io_asyncio",
    "coder_io_trio",
    "coder_io_sync",
    "coder_integrations",
    "fuzz",
    "tests",
    "examples",
)
LIBRARY_DIRS = (
    "coder_proto",
    "coder_io_common",
    "coder_io_asyncio",
    "coder_io_trio",
    "coder_io_sync",
    "coder_integrations",
)

WIRE = "docs/protocol/wire.md"
SERVER = "docs/protocol/server-behaviour.md"
MACHINES = "docs/protocol/state-machines.md"
DECISIONS = "docs/decisions.md"

#: Modules being split into new ones: their labels, references and messages are rewritten
#: together with the split, so until then their unresolved labels, outside references and
#: labelled messages do not fail the checks below. Remove an entry once its file is clean or
#: gone (``test_the_pending_lists_are_still_needed`` fails until then).
PENDING_SPLIT: tuple[str, ...] = ()
#: The conformance runner and the benchmarks still read the corpus and the transcript
#: generator from the shared folder beside the repository; they may name it until the corpus
#: and the generator live in the repository. Only outside references are excused here.
PENDING_CORPUS: tuple[str, ...] = ()


# -- prose -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prose:
    path: str
    line: int
    text: str
    kind: str  # "comment", "docstring", "string" or "test name"


_STRING = re.compile(r"(?s)^([A-Za-z]*)('''|\"\"\"|'|\")(.*)\2$")
_FSTRING_MIDDLE = getattr(tokenize, "FSTRING_MIDDLE", None)


def _docstring_lines(source: str) -> set[int]:
    """First lines of the string constants that are whole statements (docstrings)."""
    lines = set()
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            lines.add(node.value.lineno)
    return lines


def prose_of(path: str, source: str) -> Iterator[Prose]:
    """The prose of one source: comment blocks, string literals and test function names."""
    docstrings = _docstring_lines(source)
    block: list[str] = []
    block_start = block_end = 0
    previous = ""
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            if block and tok.start[0] == block_end + 1:
                block.append(tok.string.lstrip("#"))
            else:
                if block:
                    yield Prose(path, block_start, " ".join(block), "comment")
                block, block_start = [tok.string.lstrip("#")], tok.start[0]
            block_end = tok.start[0]
            continue
        if tok.type == tokenize.STRING:
            match = _STRING.match(tok.string)
            if match and "b" not in match.group(1).lower():
                kind = "docstring" if tok.start[0] in docstrings else "string"
                yield Prose(path, tok.start[0], match.group(3), kind)
        elif _FSTRING_MIDDLE is not None and tok.type == _FSTRING_MIDDLE:
            yield Prose(path, tok.start[0], tok.string, "string")
        elif tok.type == tokenize.NAME and previous == "def" and tok.string.startswith("test_"):
            yield Prose(path, tok.start[0], tok.string, "test name")
        if tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            previous = tok.string
    if block:
        yield Prose(path, block_start, " ".join(block), "comment")


def source_files(dirs: tuple[str, ...] = SOURCE_DIRS) -> list[Path]:
    files = []
    for name in dirs:
        files += [p for p in (ROOT / name).rglob("*.py") if "corpus" not in p.parts]
    files = [p for p in files if p != Path(__file__).resolve()]  # its examples are typos
    return sorted(files)


@cache
def all_prose() -> tuple[Prose, ...]:
    found: list[Prose] = []
    for path in source_files():
        found += prose_of(path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8"))
    return tuple(found)


# -- labels ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Label:
    """One cited rule: its text as written, and the page and anchor it must resolve to."""

    text: str
    page: str | None  # None: the label names no page (it cannot resolve)
    anchor: str | None  # None: the page itself


_NUM = r"\d+(?:\.\d+)*"
_SEP = r"(?:\s*,\s*|\s+and\s+|\s+or\s+|\s*[-–]\s*)"
_NUMLIST = rf"(?:{_NUM}|Q\d+)(?:{_SEP}(?:{_NUM}|Q\d+))*(?![\w.]*\d)"
_WIRE = re.compile(rf"\b[Ww]ire(?:[- ]protocol)?(?: sections?)?,? ({_NUMLIST})")
_SERVER = re.compile(rf"\b[Ss]erver[- ]behaviou?r(?: sections?)?,? ({_NUMLIST})")
_MACHINE_ITEM = r"[A-Z](?:\.\d+){0,2}(?![\w])(?:,? steps? \d+(?:\s*[-–]\s*\d+)?)?"
_MACHINES = re.compile(
    rf"\b(?:[Ss]tate[- ]machines?|[Aa]ppendix),? ((?:{_MACHINE_ITEM})(?:{_SEP}{_MACHINE_ITEM})*)"
)
_MACHINE_ID = re.compile(
    r"(?<![\w.])([A-Z])\.(\d+)(?:\.(\d+))?(?![\w]|\.\d)"
    r"(?:\s*[-–]\s*(?:\1\.)?(\d+)(?![\w]|\.\d))?"
    r"(?:,? steps? (\d+)(?:\s*[-–]\s*(\d+))?)?"
)
_DECISION = re.compile(r"(?<![\w.])D(\d{1,3})(?:\s*[-–]\s*D(\d{1,3}))?(?![\w]|\.\d)")
_ITEMS = re.compile(
    r"\b([Ww]ire|[Ss]erver[- ]behaviou?r) (\d+(?:\.\d+)?),? items? (\d+(?:(?:\s*,\s*|\s+and\s+)\d+)*)"
)
_BARE_QUESTION = re.compile(r"(?<![\w.])Q\d+\b")
_DOC_REF = re.compile(
    r"\bdocs/((?:[\w-]+/)*[\w-]+\.md)"
    r"(?:(?:\s*:)?\s+((?:\"[^\"]+\"(?:\s*(?:,|and)\s*)?)+))?"
    r"(?:(?:\s*,|\s+and)?\s*\brules?\s+(\d+(?:\s*(?:,|and|[-–])\s*\d+)*))?"
)
_TEST_LABEL = re.compile(r"^(wire|[a-z])(\d+)$")


def slug(title: str) -> str:
    """A heading's anchor as GitHub makes it."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def _anchor(*parts: object) -> str:
    return "-".join(str(p) for p in parts).lower()


def _numbers(text: str) -> Iterator[str]:
    """The items of a number list, ranges expanded on their last component (``3.3-3.5``)."""
    items = re.split(r"\s*,\s*|\s+and\s+|\s+or\s+", text)
    for item in filter(None, items):
        bounds = re.split(r"\s*[-–]\s*", item)
        if len(bounds) == 2 and bounds[0].rsplit(".", 1)[:-1] == bounds[1].rsplit(".", 1)[:-1]:
            head, _, first = bounds[0].rpartition(".")
            last = bounds[1].rpartition(".")[2]
            if first.isdigit() and last.isdigit() and int(first) <= int(last):
                for n in range(int(first), int(last) + 1):
                    yield f"{head}.{n}" if head else str(n)
                continue
        yield from bounds


def _numbered(page: str, prefix: str, text: str) -> Iterator[Label]:
    for number in _numbers(text):
        if number.startswith("Q"):
            yield Label(f"{prefix} {number}", page, number.lower())
        else:
            yield Label(f"{prefix} {number}", page, "s" + number.replace(".", "-"))


def _machine(letter: str, *numbers: object) -> Label:
    text = ".".join([letter, *(str(n) for n in numbers)])
    return Label(text, MACHINES, _anchor(letter, *numbers))


def _test_name_labels(name: str) -> Iterator[Label]:
    """``test_d22_...`` (D22), ``test_c2_4_...`` (C.2 step 4), ``test_wire1_4_...`` (wire 1.4)."""
    current: list[str] = []

    def flush() -> Iterator[Label]:
        if not current:
            return
        head, *rest = current
        if head == "wire":
            yield from _numbered(WIRE, "wire", ".".join(rest))
        elif head == "d" and len(rest) == 1:
            yield Label(f"D{rest[0]}", DECISIONS, f"d{rest[0]}")
        elif head != "d":
            yield _machine(head.upper(), *rest)

    for token in name.removeprefix("test_").split("_"):
        match = _TEST_LABEL.match(token)
        if match:
            yield from flush()
            current = [match.group(1), match.group(2)]
        elif token.isdigit() and current:
            current.append(token)
        else:
            break
    yield from flush()


def labels_in(text: str) -> Iterator[Label]:
    """Every rule label in one piece of prose."""
    text = re.sub(r"\s+", " ", text)
    listed: list[tuple[int, int]] = []
    for pattern, page, prefix in ((_WIRE, WIRE, "wire"), (_SERVER, SERVER, "server-behaviour")):
        for match in pattern.finditer(text):
            listed.append(match.span(1))
            yield from _numbered(page, prefix, match.group(1))
    for match in _ITEMS.finditer(text):  # "wire 5 item 4": item 4 of section 5's list
        page, prefix = (
            (WIRE, "wire") if match.group(1).lower() == "wire" else (SERVER, "server-behaviour")
        )
        for item in _numbers(match.group(3)):
            yield from _numbered(page, prefix, f"{match.group(2)}.{item}")
    for match in _MACHINES.finditer(text):
        items = re.split(r"\s*,\s*(?![a-z])|\s+and\s+|\s+or\s+", match.group(1))
        for item in items:
            letters = re.fullmatch(r"([A-Z])(?:\s*[-–]\s*([A-Z]))?", item)
            if letters is None:
                continue  # a numbered rule: found below
            first, last = letters.group(1), letters.group(2) or letters.group(1)
            for code in range(ord(first), ord(last) + 1):
                yield Label(chr(code), MACHINES, chr(code).lower())
    for match in _MACHINE_ID.finditer(text):
        letter, section, sub, range_end, step, step_end = match.groups()
        if sub is not None:
            yield _machine(letter, section, sub)
        elif step is not None:
            for n in range(int(step), int(step_end or step) + 1):
                yield _machine(letter, section, n)
        else:
            yield _machine(letter, section)
        if range_end is not None and sub is None:
            for n in range(int(section) + 1, int(range_end) + 1):
                yield _machine(letter, n)
    for match in _DECISION.finditer(text):
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        if last < first:
            yield Label(match.group(0), DECISIONS, f"d{first}-d{last}")
        for n in range(first, last + 1):
            yield Label(f"D{n}", DECISIONS, f"d{n}")
    for match in _BARE_QUESTION.finditer(text):
        if not any(start <= match.start() < end for start, end in listed):
            yield Label(match.group(0), None, None)  # which document's open question?
    for match in _DOC_REF.finditer(text):
        page = "docs/" + match.group(1)
        yield Label(page, page, None)
        for title in re.findall(r"\"([^\"]+)\"", match.group(2) or ""):
            yield Label(f'{page} "{title}"', page, slug(title))
        for number in _numbers(match.group(3) or ""):
            yield Label(f"{page} rule {number}", page, f"rule-{number}")


def labels_of(prose: Prose) -> Iterator[Label]:
    if prose.kind == "test name":
        return _test_name_labels(prose.text)
    return labels_in(prose.text)


@cache
def anchors(page: str) -> frozenset[str] | None:
    """The anchors of a page (explicit ``<a id>`` and heading slugs), or None if it is missing."""
    path = ROOT / page
    if not path.is_file():
        return None
    text = re.sub(r"(?ms)^```.*?^```", "", path.read_text(encoding="utf-8"))
    found = set(re.findall(r"<a id=\"([^\"]+)\"></a>", text))
    found |= {slug(m) for m in re.findall(r"^#{1,6} (.+?)\s*$", text, re.MULTILINE)}
    return frozenset(found)


def resolves(label: Label) -> bool:
    if label.page is None:
        return False
    page_anchors = anchors(label.page)
    if page_anchors is None:
        return False
    return label.anchor is None or label.anchor in page_anchors


# -- references that leave the repository ------------------------------------------------------

_OUTSIDE = (
    (re.compile(r"\.\./shared\b|\bCODER_SHARED_DIR\b"), "the shared design folder beside the repo"),
    (re.compile(r"\bspec/[\w-]+\.md\b"), "a spec file outside the repository"),
    (re.compile(r"\b(?:DESIGN|STYLE|DECISIONS)(?:\.md)?\b"), "a design document outside the repo"),
    (re.compile(r"\bseeds/|\bseed (?:README|durable-workflows)\b|\bseed \""), "a seed document"),
    (re.compile(r"\banchors\.md\b"), "the reference anchors"),
    (re.compile(r"\b(?:project )?issues? #?\d+\b"), "an issue tracker entry"),
)
_PROJECT_DOC = re.compile(r"(?<![\w/.-])([A-Z][A-Z_-]{2,}\.md)\b")


@cache
def _repo_markdown() -> frozenset[str]:
    return frozenset(
        p.name for p in ROOT.rglob("*.md") if ".venv" not in p.parts and ".git" not in p.parts
    )


def outside_references(prose: Prose) -> Iterator[str]:
    if prose.kind == "test name":
        return
    text = re.sub(r"\s+", " ", prose.text)
    for pattern, what in _OUTSIDE:
        for match in pattern.finditer(text):
            yield f"{match.group(0)!r} ({what})"
    if prose.kind in ("comment", "docstring"):
        for match in _PROJECT_DOC.finditer(text):
            if match.group(1) not in _repo_markdown():
                yield f"{match.group(1)!r} (no such file in the repository)"


# -- the checks --------------------------------------------------------------------------------


def _pending(path: str, pending: tuple[str, ...]) -> bool:
    return any(path == p or (p.endswith("/") and path.startswith(p)) for p in pending)


def label_problems() -> list[tuple[str, str]]:
    problems = []
    for prose in all_prose():
        for label in labels_of(prose):
            if not resolves(label):
                where = f"{label.page}#{label.anchor}" if label.page else "no page"
                problems.append((prose.path, f"{prose.path}:{prose.line}: {label.text} ({where})"))
    return problems


def reference_problems() -> list[tuple[str, str]]:
    return [
        (prose.path, f"{prose.path}:{prose.line}: {ref}")
        for prose in all_prose()
        for ref in outside_references(prose)
    ]


def test_every_rule_label_resolves_to_a_docs_anchor() -> None:
    problems = [p for path, p in label_problems() if not _pending(path, PENDING_SPLIT)]
    assert not problems, "labels that do not resolve:\n" + "\n".join(problems)


def test_no_reference_leaves_the_repository() -> None:
    pending = PENDING_SPLIT + PENDING_CORPUS
    problems = [p for path, p in reference_problems() if not _pending(path, pending)]
    assert not problems, "references to documents outside the repository:\n" + "\n".join(problems)


def test_the_pending_lists_are_still_needed() -> None:
    flagged = {path for path, _ in label_problems() + reference_problems()}
    for entry in PENDING_SPLIT + PENDING_CORPUS:
        assert (ROOT / entry).exists(), f"{entry} no longer exists: drop it from the pending list"
        assert any(_pending(path, (entry,)) for path in flagged), (
            f"{entry} is clean now: drop it from the pending list"
        )


def test_many_labels_are_found_and_the_docs_resolve_them() -> None:
    found = {label for prose in all_prose() for label in labels_of(prose)}
    resolved = {label for label in found if resolves(label)}
    # Guards the scanner itself: a broken pattern would find nothing and pass the checks above.
    assert len(found) > 150 and len(resolved) > 150
    forms = {label.page for label in resolved}
    assert {WIRE, SERVER, MACHINES, DECISIONS} <= forms


# -- the pages themselves ----------------------------------------------------------------------


def _pages() -> list[Path]:
    return sorted((ROOT / "docs").rglob("*.md"))


def test_every_link_between_pages_resolves() -> None:
    problems = []
    for page in _pages():
        text = re.sub(r"(?ms)^```.*?^```", "", page.read_text(encoding="utf-8"))
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # an external URL
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(ROOT)}: ({target})"
            if not dest.is_file() or ROOT not in dest.parents:
                problems.append(f"{where} names no file of the repository")
            elif anchor and anchor not in (anchors(dest.relative_to(ROOT).as_posix()) or ()):
                problems.append(f"{where} names no anchor of that page")
    assert not problems, "\n".join(problems)


def test_anchors_are_unique_on_each_page() -> None:
    for page in _pages():
        ids = re.findall(r"<a id=\"([^\"]+)\"></a>", page.read_text(encoding="utf-8"))
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        assert not repeated, f"{page.relative_to(ROOT)} repeats {repeated}"


def test_the_layers_picture_is_an_svg_the_architecture_page_shows() -> None:
    root = ElementTree.parse(ROOT / "docs" / "layers.svg").getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert "](layers.svg)" in (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


# -- the grammar, on purpose-made prose ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("retries follow D12 and D21-D22", ["D12", "D21", "D22"]),
        ("the gate (state machines E.2 step 3, C.2 steps 4-5)", ["E.2.3", "C.2.4", "C.2.5"]),
        ("state machines C-E, D17", ["C", "D", "E", "D17"]),
        ("state machines A.1-A.3, appendix P", ["P", "A.1", "A.2", "A.3"]),
        ("J.19-J.20 and K.3", ["J.19", "J.20", "K.3"]),
        ("wire 1.1, 11; wire sections 2 and 7", ["wire 1.1", "wire 11", "wire 2", "wire 7"]),
        (
            "(server-behaviour 3.3-3.5, Q7)",
            [f"server-behaviour {n}" for n in ("3.3", "3.4", "3.5", "Q7")],
        ),
        (
            'docs/durable-workflows.md: "Shape each step", "Recover after a crash"',
            [
                "docs/durable-workflows.md",
                'docs/durable-workflows.md "Shape each step"',
                'docs/durable-workflows.md "Recover after a crash"',
            ],
        ),
        (
            'docs/agents.md "Structured output", rules 2 and 3',
            [
                "docs/agents.md",
                'docs/agents.md "Structured output"',
                "docs/agents.md rule 2",
                "docs/agents.md rule 3",
            ],
        ),
        ("the wire format, wire bytes, e.g. Python 3.11 and 2D arrays", []),
        ("A1 -> R1, A.4 branch D", ["A.4"]),
        ("server-behaviour 1.5 item 4", ["server-behaviour 1.5", "server-behaviour 1.5.4"]),
        ("wire 5 items 4 and 5", ["wire 5", "wire 5.4", "wire 5.5"]),
    ],
)
def test_the_label_grammar(text: str, expected: list[str]) -> None:
    assert sorted(label.text for label in labels_in(text)) == sorted(expected)


def test_test_names_carry_labels() -> None:
    def names(name: str) -> list[str]:
        return [label.text for label in _test_name_labels(name)]

    assert names("test_d22_h4_cancelled_during_archive") == ["D22", "H.4"]
    assert names("test_h2_3_the_adapter_must_match") == ["H.2.3"]
    assert names("test_wire1_4_a_legacy_only_server") == ["wire 1.4"]
    assert names("test_rfc3339_round_trip") == []


@pytest.mark.parametrize(
    "text",
    [
        "D99",
        "D0",
        "D24-D21",
        "C.9",
        "C.2 step 9",
        "C.2.9",
        "J.25",
        "state machines L",
        "wire 13",
        "wire 1.9",
        "server-behaviour 8.15",
        "server-behaviour 3.3 item 8",
        "(Q3)",
        'docs/durable-workflows.md "Shape every step"',
        "docs/architecture.md rule 7",
        "docs/no-such-page.md",
    ],
)
def test_a_typo_does_not_resolve(text: str) -> None:
    found = list(labels_in(text))
    assert found and not all(resolves(label) for label in found)


@pytest.mark.parametrize(
    "text",
    [
        "D22",
        "C.2 step 4",
        "J.24",
        "appendix P",
        "wire 1.4",
        "wire Q12",
        "server-behaviour 8.12",
        "server-behaviour Q9",
        'docs/durable-workflows.md "Shape each step"',
        'docs/architecture.md "Public API" and rule 6',
    ],
)
def test_a_real_label_resolves(text: str) -> None:
    found = list(labels_in(text))
    assert found and all(resolves(label) for label in found), found


@pytest.mark.parametrize(
    "text",
    [
        'DESIGN "Public API"',
        "spec/DECISIONS.md D21",
        "seed durable-workflows",
        'seed README "Files"',
        "../shared/conformance",
        "project issue 7",
    ],
)
def test_outside_references_are_found(text: str) -> None:
    assert list(outside_references(Prose("x.py", 1, text, "docstring")))


# -- text users see --------------------------------------------------------------------------------


def test_no_rule_label_in_library_strings() -> None:
    """Exception messages, log lines and CLI help are plain strings in the library's modules
    (and in the examples a user copies); none of them may carry a rule label (docstrings and
    comments may)."""
    problems = []
    for path in source_files(LIBRARY_DIRS) + source_files(("fuzz", "examples")):
        name = path.relative_to(ROOT).as_posix()
        if _pending(name, PENDING_SPLIT):
            continue
        for prose in prose_of(name, path.read_text(encoding="utf-8")):
            if prose.kind == "string":
                found = [label.text for label in labels_in(prose.text)]
                if found:
                    problems.append(f"{name}:{prose.line}: {prose.text!r} cites {found}")
    assert not problems, "\n".join(problems)


def _help_texts(parser: argparse.ArgumentParser) -> Iterator[str]:
    yield parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _help_texts(sub)


def test_cli_help_carries_no_rule_label() -> None:
    import importlib.util

    from coder_integrations.cli import build_parser

    spec = importlib.util.spec_from_file_location(
        "custom_loop_template", ROOT / "examples" / "custom_loop" / "selectors_loop.py"
    )
    assert spec is not None and spec.loader is not None
    template = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(template)

    texts = [*_help_texts(build_parser()), *_help_texts(template.build_parser())]
    for module in ("fuzz", "tests.bench"):
        out = subprocess.run(
            [sys.executable, "-m", module, "--help"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
            check=True,
        )
        texts.append(out.stdout)
    assert len(texts) > 5 and all(text.strip() for text in texts)
    problems = [(text, list(labels_in(text))) for text in texts]
    assert [p for p in problems if p[1]] == []
