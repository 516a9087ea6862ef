"""The crash-point matrix (docs/durable-workflows.md "Recover after a crash").

Each scenario runs the workflow of ``tests/durable/worker.py`` in a subprocess against the
fake server (which stays up in the test process), SIGKILLs it at the named crash point, maybe
again at a point of the recovery pass that follows, then runs a fresh process to the end. The
lease a killed process left behind is let run out before the next process starts (that such
a lease holds the workflow until then is ``test_lease_processes.py``'s part). For every
scenario:

* each external effect (the stock reservation, the charge) is applied exactly once: the
  payment service honours idempotency keys, and holds exactly one reservation and one charge;
* no finished turn is resubmitted: each step's prompt (found by its marker) was sent exactly
  as often as the scenario allows (a second attempt only where the first was cut short
  before its tool ran, or never sent);
* no orphan chat is left unarchived: at the end every chat on the server is archived;
* the step's result is recovered when the turn had finished: the final process reports the
  step as ``recovered`` with the same text a live turn returns.

The matrix runs on every shared store: SQLite, ``PostgresStore`` and ``AsyncPostgresStore``
(on the PostgreSQL server the tests start). Scenarios run in parallel lanes (each scenario has
its own server, store and payment service), the fake server runs with tiny delays, and the
workflow processes are forked from a pre-imported zygote (``tests/durable/zygote.py``), so the
matrix stays fast.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import queue
import signal
import tempfile
import uuid
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from coder_integrations.fake_server import FakeCoderServer
from tests.postgres_server import PostgresServer
from tests.workers import Zygote

from . import payments
from .orders import add_scripts, chats, expire_lease


@attrs.frozen
class Scenario:
    """``crashes``: the crash point of each killed process, in order. ``attempts``: how many
    times each step's prompt may be sent. ``recovered``: the steps the final process must
    answer from the durable layer instead of running them."""

    name: str
    crashes: tuple[str, ...]
    recovered: frozenset[str]
    attempts: tuple[tuple[str, int], ...] = (("reserve", 1), ("charge", 1))
    orphans: int = 0


BOTH = frozenset({"reserve", "charge"})
RESERVE = frozenset({"reserve"})

SCENARIOS = (
    # Before the first checkpoint: the chat is an orphan; a fresh chat, then the sweep.
    Scenario("after-chat-created", ("reserve/event:create_chat",), frozenset(), orphans=1),
    # The first step's tool claimed the chat (eager checkpoint) but never ran: cut short.
    Scenario(
        "after-claim",
        ("reserve/after:put_checkpoint:in_flight",),
        frozenset(),
        attempts=(("reserve", 2), ("charge", 1)),
    ),
    Scenario("reserve-tool-before-effect", ("reserve/effect:before",), RESERVE),
    Scenario("reserve-tool-after-effect", ("reserve/effect:after",), RESERVE),
    Scenario("reserve-after-done", ("reserve/after:put_ledger:done",), RESERVE),
    Scenario("reserve-after-results", ("reserve/event:submit_tool_results",), RESERVE),
    Scenario("reserve-before-checkpoint", ("reserve/before:put_checkpoint:finished",), RESERVE),
    Scenario("after-checkpoint", ("reserve/after:put_checkpoint:finished",), RESERVE),
    # The send of a resumed step journaled, then the process died before sending.
    Scenario("charge-after-send-journaled", ("charge/after:put_journal:submitting",), RESERVE),
    # The send landed; the run paused for a tool that never started: cut short, resubmitted.
    Scenario(
        "charge-after-send",
        ("charge/event:create_chat_message",),
        RESERVE,
        attempts=(("reserve", 1), ("charge", 2)),
    ),
    Scenario(
        "charge-tool-before-committing",
        ("charge/before:put_ledger:committing",),
        RESERVE,
        attempts=(("reserve", 1), ("charge", 2)),
    ),
    Scenario("charge-tool-before-effect", ("charge/effect:before",), BOTH),
    Scenario("charge-tool-after-effect", ("charge/effect:after",), BOTH),
    Scenario("charge-after-done", ("charge/after:put_ledger:done",), BOTH),
    Scenario("charge-after-results", ("charge/event:submit_tool_results",), BOTH),
    Scenario("charge-before-checkpoint", ("charge/before:put_checkpoint:finished",), BOTH),
    Scenario("charge-after-checkpoint", ("charge/after:put_checkpoint:finished",), BOTH),
    # A second crash at each write of the recovery pass.
    Scenario(
        "recovery-after-verdict", ("charge/effect:after", "charge/after:put_journal:resumed"), BOTH
    ),
    Scenario("recovery-in-redrive", ("charge/effect:after", "charge/effect:after"), BOTH),
    Scenario(
        "recovery-after-redrive-done", ("charge/effect:after", "charge/after:put_ledger:done"), BOTH
    ),
    Scenario(
        "recovery-after-submit",
        ("charge/effect:after", "charge/event:submit_tool_results"),
        BOTH,
    ),
    Scenario(
        "recovery-after-checkpoint",
        ("charge/effect:after", "charge/after:put_checkpoint:finished"),
        BOTH,
    ),
    Scenario(
        "recovery-after-cut-short-verdict",
        ("charge/before:put_ledger:committing", "charge/after:put_journal:cut-short"),
        RESERVE,
        attempts=(("reserve", 1), ("charge", 2)),
    ),
    Scenario(
        "recovery-after-interrupt",
        ("charge/before:put_ledger:committing", "charge/event:interrupt_chat"),
        RESERVE,
        attempts=(("reserve", 1), ("charge", 2)),
    ),
    Scenario(
        "recovery-after-resend-journaled",
        ("charge/before:put_ledger:committing", "charge/after:put_journal:submitting"),
        RESERVE,
        attempts=(("reserve", 1), ("charge", 2)),
    ),
    # Archive at the end: killed after the archive landed, before the store forgot the chat.
    Scenario("archive-after-archived", ("archive/event:archive_chat",), BOTH),
    Scenario("archive-after-forget", ("archive/after:forget_chat",), BOTH),
)


@attrs.frozen
class Outcome:
    scenario: Scenario
    exits: tuple[int, ...]
    reached: tuple[str, ...]
    results: dict[str, Any] | None
    effects: list[dict[str, Any]]
    calls: list[tuple[str, str]]
    chats: list[dict[str, Any]]
    log: str


#: The stores the matrix runs on.
STORES = ("sqlite", "postgres", "postgres_async")


def run_scenario(
    scenario: Scenario, zygote: Zygote, store: str, postgres: PostgresServer | None
) -> Outcome:
    with (
        tempfile.TemporaryDirectory() as tmp,
        FakeCoderServer(chunk_delay=0.0005, interrupt_delay=0.02, run_start_delay=0.0) as server,
    ):
        add_scripts(server)
        paths = {
            name: os.path.join(tmp, name)
            for name in ("store.sqlite3", "payments.sqlite3", "result.json", "reached", "log")
        }
        env = {
            "CODER_URL": server.url,
            "CODER_SESSION_TOKEN": server.token,
            "CODER_ORGANIZATION_ID": server.organization_id,
            "DURABLE_DB": paths["store.sqlite3"],
            "DURABLE_PG_SCHEMA": "",
            "DURABLE_PG_ASYNC": "",
            "PAYMENTS_DB": paths["payments.sqlite3"],
            "DURABLE_WORKFLOW": f"wf-{scenario.name}",
            "DURABLE_RESULT": paths["result.json"],
            "DURABLE_REACHED": paths["reached"],
            "DURABLE_LOG": paths["log"],
        }
        if postgres is not None:
            env["DURABLE_DB"] = postgres.conninfo()
            env["DURABLE_PG_SCHEMA"] = f"crash_{uuid.uuid4().hex[:12]}"
            env["DURABLE_PG_ASYNC"] = "1" if store == "postgres_async" else ""
        exits: list[int] = []
        reached: list[str] = []
        for crash in (*scenario.crashes, ""):
            if os.path.exists(paths["reached"]):
                os.remove(paths["reached"])
            with open(paths["log"], "a") as f:
                f.write(f"--- crash point {crash!r}\n")
            exits.append(zygote.run({**env, "DURABLE_CRASH": crash}))
            if exits[-1] == -signal.SIGKILL:
                # The killed process's lease runs out before the next process starts.
                expire_lease(env["DURABLE_DB"], env["DURABLE_PG_SCHEMA"], env["DURABLE_WORKFLOW"])
            if os.path.exists(paths["reached"]):
                with open(paths["reached"]) as f:
                    reached.append(f.read())
        with open(paths["log"]) as f:
            log = f.read()[-8000:]
        results = None
        if os.path.exists(paths["result.json"]):
            with open(paths["result.json"]) as f:
                results = json.load(f)
        server.wait_idle(5.0)
        if postgres is not None:  # the workflow processes used the PostgreSQL store
            with postgres.admin() as conn:
                used = conn.execute(
                    "SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = %s "
                    "AND tablename = 'checkpoints'",
                    (env["DURABLE_PG_SCHEMA"],),
                ).fetchall()
            assert used, f"{scenario.name}: no store in {env['DURABLE_PG_SCHEMA']}"
            postgres.drop_schema(env["DURABLE_PG_SCHEMA"])
        return Outcome(
            scenario=scenario,
            exits=tuple(exits),
            reached=tuple(reached),
            results=results,
            effects=payments.effects(paths["payments.sqlite3"]),
            calls=payments.calls(paths["payments.sqlite3"]),
            chats=chats(server),
            log=log,
        )


LANES = 4


@pytest.fixture(scope="module", params=STORES)
def outcomes(request: pytest.FixtureRequest) -> Iterator[dict[str, Outcome]]:
    store: str = request.param
    postgres = request.getfixturevalue("postgres_server") if store != "sqlite" else None
    zygotes: queue.Queue[Zygote] = queue.Queue()
    for _ in range(LANES):
        zygotes.put(Zygote())

    def run(scenario: Scenario) -> Outcome:
        zygote = zygotes.get()
        try:
            return run_scenario(scenario, zygote, store, postgres)
        finally:
            zygotes.put(zygote)

    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=LANES) as pool:
            yield {o.scenario.name: o for o in pool.map(run, SCENARIOS)}
    finally:
        while not zygotes.empty():
            zygotes.get().close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the matrix forks its workflow processes")
@pytest.mark.timeout(600)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_crash_point(scenario: Scenario, outcomes: dict[str, Outcome]) -> None:
    check_outcome(scenario, outcomes[scenario.name])


def check_outcome(scenario: Scenario, outcome: Outcome) -> None:
    """What every scenario must end with (see the module docstring)."""
    context = f"{scenario.name}\n{outcome.log}"
    # Every killed process was killed at its crash point, and the last one finished.
    assert outcome.exits == (*(-signal.SIGKILL for _ in scenario.crashes), 0), context
    assert outcome.reached == scenario.crashes, context
    results = outcome.results
    assert results is not None, context
    # Each external effect applied exactly once.
    kinds = sorted(e["kind"] for e in outcome.effects)
    assert kinds == ["charge", "reserve"], (outcome.effects, context)
    # No finished turn resubmitted: prompts per step on the workflow's chat.
    main = [c for c in outcome.chats if any("/charge]" in p for p in c["prompts"])]
    assert len(main) == 1, (outcome.chats, context)
    prompts = main[0]["prompts"]
    for step, allowed in scenario.attempts:
        sent = sum(1 for p in prompts if f"/{step}]" in p)
        assert sent == allowed, (step, prompts, context)
    # No orphan chat left unarchived.
    assert all(c["archived"] for c in outcome.chats), (outcome.chats, context)
    assert len(outcome.chats) == 1 + scenario.orphans, (outcome.chats, context)
    assert len(results["sweep"]["archived"]) == scenario.orphans, context
    # The step's result recovered when the turn had finished, as a live turn returns it.
    for step in ("reserve", "charge"):
        assert results[step]["recovered"] == (step in scenario.recovered), (step, context)
    receipts = {e["kind"]: e["receipt"] for e in outcome.effects}
    assert results["reserve"]["text"] == f'Reserved: "reservation {receipts["reserve"]}"', context
    assert results["charge"]["text"] == f'Charged: "charged: receipt {receipts["charge"]}"', context
    assert results["archive"]["archived"] is True, context
