"""``python -m fuzz --seconds 60``: run every harness for a time budget.

Harnesses:

* ``bytes``: ``fuzz.harness_bytes`` (WebSocket client, reader, translator on arbitrary
  bytes): under atheris when it is installed (the ``fuzz`` extra), otherwise under a built-in
  mutation engine (random byte edits and splices of the seed inputs, no coverage feedback);
* ``mutate``: ``fuzz.mutate`` over the seed transcripts in ``fuzz/corpus`` (reader +
  translator, and the whole turn machine through ``coder_proto.transcript.replay``);
* ``stateful``: the Hypothesis state machine ``fuzz.stateful.ReaderAgainstModel``.

The budget is shared (half for ``bytes``, a third for ``mutate``, the rest for
``stateful``); ``--only NAME`` runs one harness with the whole budget. Executions per harness
and every finding are printed; a finding's input and traceback are saved under
``fuzz/_work/findings/`` (git-ignored). The exit status is 1 when anything was found.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import pathlib
import random
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from coder_proto.transcript import parse_transcript

from . import harness_bytes
from .mutate import MUTATIONS, baseline, check_mutant, check_replay, streams_of

ROOT = pathlib.Path(__file__).resolve().parent
CORPUS = ROOT / "corpus"
WORK = ROOT / "_work"
FINDINGS = WORK / "findings"
#: An input slower than this is reported as a (possible) hang.
SLOW_INPUT = 2.0


class Report:
    def __init__(self) -> None:
        self.executions: dict[str, int] = {}
        self.findings: list[str] = []
        self.engines: dict[str, str] = {}

    def finding(self, harness: str, data: bytes, error: BaseException | str) -> None:
        digest = hashlib.sha1(data).hexdigest()[:12]
        FINDINGS.mkdir(parents=True, exist_ok=True)
        base = FINDINGS / f"{harness}-{digest}"
        base.with_suffix(".input").write_bytes(data)
        text = error if isinstance(error, str) else "".join(traceback.format_exception(error))
        base.with_suffix(".txt").write_text(text, encoding="utf-8")
        first = text.strip().splitlines()[-1] if text.strip() else ""
        self.findings.append(f"{harness}: {first} ({base.with_suffix('.input')})")


def _corpus_files() -> list[tuple[str, str]]:
    """``(file name, text)`` of every seed transcript."""
    return [(p.name, p.read_text(encoding="utf-8")) for p in sorted(CORPUS.glob("*.jsonl"))]


def _corpus_texts() -> list[str]:
    return [text for _, text in _corpus_files()]


def _streams() -> list[Any]:
    out = []
    for text in _corpus_texts():
        out.extend(streams_of(parse_transcript(text)))
    return out


# -- bytes ----------------------------------------------------------------------------------------

_TOKENS = (
    b"{",
    b"}",
    b"[",
    b"]",
    b'"',
    b",",
    b":",
    b"null",
    b"true",
    b"-1",
    b"1e999",
    b"\\u0000",
    b'"type"',
    b'"message_part"',
    b'"status"',
    b'"seq"',
    b'"text"',
    b"\xff",
    b"\xfe",
    b"\x00",
)


def _mutate_bytes(data: bytes, rng: random.Random, pool: list[bytes]) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 3, 6))):
        op = rng.randrange(7)
        n = len(buf)
        if op == 0 and n:
            i = rng.randrange(n)
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1 and n:
            buf[rng.randrange(n)] = rng.randrange(256)
        elif op == 2:
            i = rng.randrange(n + 1)
            buf[i:i] = rng.choice(_TOKENS)
        elif op == 3 and n > 1:
            i = rng.randrange(n)
            del buf[i : i + rng.randint(1, 16)]
        elif op == 4 and n > 1:
            i = rng.randrange(n)
            j = min(n, i + rng.randint(1, 64))
            k = rng.randrange(n + 1)
            buf[k:k] = buf[i:j]
        elif op == 5:
            other = rng.choice(pool)
            if other:
                i = rng.randrange(len(other))
                k = rng.randrange(n + 1)
                buf[k:] = other[i:]
        elif op == 6 and n > 2:
            buf[1:] = buf[1 : rng.randrange(1, n)]
    if buf and rng.random() < 0.05:
        buf[0] = rng.randrange(3)
    return bytes(buf[: harness_bytes.MAX_INPUT])


def _seed_bytes() -> list[bytes]:
    streams = []
    for stream in _streams():
        streams.append([[json.dumps(list(b)) + "\n" for b in stream.batches]])
    return harness_bytes.seed_inputs(streams)


def run_bytes(seconds: float, rng: random.Random, report: Report) -> None:
    seeds = _seed_bytes()
    try:
        import atheris  # noqa: F401
    except ImportError:
        pass
    else:  # pragma: no cover - needs atheris
        _run_atheris(seconds, seeds, report)
        return
    report.engines["bytes"] = "built-in mutation engine (atheris not installed)"
    deadline = time.monotonic() + seconds
    pool = list(seeds)
    count = 0
    while time.monotonic() < deadline:
        for _ in range(50):
            data = _mutate_bytes(rng.choice(pool), rng, pool)
            started = time.perf_counter()
            try:
                harness_bytes.TestOneInput(data)
            except Exception as exc:
                report.finding("bytes", data, exc)
            if time.perf_counter() - started > SLOW_INPUT:
                report.finding("bytes", data, f"slow input: {time.perf_counter() - started:.1f}s")
            count += 1
            if rng.random() < 0.002 and len(pool) < 4000:
                pool.append(data)
    report.executions["bytes"] = count


def _run_atheris(seconds: float, seeds: list[bytes], report: Report) -> None:  # pragma: no cover
    corpus = WORK / "bytes_corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        (corpus / hashlib.sha1(seed).hexdigest()).write_bytes(seed)
    FINDINGS.mkdir(parents=True, exist_ok=True)
    report.engines["bytes"] = "atheris"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fuzz.harness_bytes",
            str(corpus),
            f"-max_total_time={max(int(seconds), 1)}",
            f"-artifact_prefix={FINDINGS}/bytes-",
            "-timeout=10",
            "-rss_limit_mb=4096",
        ],
        cwd=ROOT.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    count = 0
    for line in proc.stderr.splitlines():
        if line.startswith("#") and ("DONE" in line or "pulse" in line or "NEW" in line):
            try:
                count = max(count, int(line[1:].split()[0]))
            except ValueError:
                pass
        if "Done " in line and "runs in" in line:
            try:
                count = max(count, int(line.split("Done ")[1].split()[0]))
            except (IndexError, ValueError):
                pass
    report.executions["bytes"] = count
    if proc.returncode != 0:
        report.findings.append(f"bytes: atheris exited {proc.returncode}: {proc.stderr[-400:]}")


# -- mutate ----------------------------------------------------------------------------------------


def run_mutate(seconds: float, rng: random.Random, report: Report) -> None:
    streams = [(s, baseline(s)) for s in _streams()]
    files = _corpus_files()
    names = list(MUTATIONS)
    deadline = time.monotonic() + seconds
    count = 0
    while time.monotonic() < deadline:
        for _ in range(20):
            stream, base = rng.choice(streams)
            name = rng.choice(names)
            seed = rng.randrange(2**32)
            replayed: str | None = None
            try:
                if rng.random() < 0.1:
                    replayed, text = rng.choice(files)
                    check_replay(text, name, random.Random(seed))
                else:
                    check_mutant(stream, name, random.Random(seed), base)
            except Exception as exc:
                # Enough to reproduce it: check_replay(corpus file, mutation, Random(seed)),
                # or check_mutant(the stream, mutation, Random(seed), baseline(stream)).
                found: dict[str, Any] = {"mutation": name, "seed": seed}
                if replayed is not None:
                    found["replay_of"] = f"fuzz/corpus/{replayed}"
                else:
                    found["batches"] = [list(b) for b in stream.batches]
                    found["after_id"] = stream.after_id
                    found["tool_names"] = list(stream.tool_names)
                report.finding("mutate", json.dumps(found).encode(), exc)
            count += 1
    report.executions["mutate"] = count


# -- stateful --------------------------------------------------------------------------------------


def run_stateful(seconds: float, rng: random.Random, report: Report) -> None:
    from hypothesis import HealthCheck, settings
    from hypothesis.stateful import run_state_machine_as_test

    from .stateful import ReaderAgainstModel

    deadline = time.monotonic() + seconds
    before = ReaderAgainstModel.steps_run
    examples = 0
    while time.monotonic() < deadline:
        try:
            run_state_machine_as_test(
                ReaderAgainstModel,
                settings=settings(
                    max_examples=25,
                    deadline=None,
                    database=None,
                    derandomize=False,
                    stateful_step_count=30,
                    suppress_health_check=list(HealthCheck),
                ),
            )
        except Exception as exc:
            report.finding("stateful", repr(exc).encode(), exc)
            break
        examples += 25
    report.executions["stateful"] = ReaderAgainstModel.steps_run - before
    report.engines["stateful"] = f"hypothesis ({examples} examples; executions are rule steps)"


HARNESSES: dict[str, Callable[[float, random.Random, Report], None]] = {
    "bytes": run_bytes,
    "mutate": run_mutate,
    "stateful": run_stateful,
}
_SHARES = {"bytes": 0.5, "mutate": 0.35, "stateful": 0.15}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="total time budget")
    parser.add_argument("--only", choices=sorted(HARNESSES), help="run one harness")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    parser.add_argument("--clean", action="store_true", help="delete earlier findings first")
    args = parser.parse_args(argv)
    # Mutated sessions make the core log warnings by design (a refused interrupt...); an
    # internal error is a finding anyway, raised by the harnesses.
    logging.getLogger("coder_proto").setLevel(logging.CRITICAL)
    if args.clean and FINDINGS.exists():
        shutil.rmtree(FINDINGS)
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    report = Report()
    names = [args.only] if args.only else list(HARNESSES)
    started = time.monotonic()
    for name in names:
        share = 1.0 if args.only else _SHARES[name]
        HARNESSES[name](args.seconds * share, rng, report)
    elapsed = time.monotonic() - started
    print(f"fuzz: seed {seed}, {elapsed:.1f}s")
    for name in names:
        engine = report.engines.get(name)
        suffix = f"  [{engine}]" if engine else ""
        print(f"  {name:9s} {report.executions.get(name, 0):>10d} executions{suffix}")
    print(f"  total     {sum(report.executions.values()):>10d} executions")
    if report.findings:
        print(f"{len(report.findings)} finding(s):")
        for finding in report.findings[:50]:
            print(f"  {finding}")
        return 1
    print("no findings")
    return 0


if __name__ == "__main__":
    sys.exit(main())
