"""The order workflow's harness, shared by the crash-point matrix (``tests/durable``) and the
Temporal tests (``tests/temporal``): the model's answers on the fake server to the steps that
reserve stock and charge the card (each through a crash-safe tool of the workflow process,
against the fake payment service of ``payments.py``), the chats a run left on that server,
the store whose writes are crash points of a workflow process, and the end of the lease that
a killed process left behind."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any

from coder_integrations.fake_server import FakeCoderServer
from coder_io_common.stores import PostgresStore, SQLiteStore
from coder_proto.durable import DEFAULT_TENANT
from coder_proto.fake import CallClientTool, Say, Script


def add_scripts(server: FakeCoderServer) -> None:
    """The model's answers to the steps ``reserve`` and ``charge``: each calls its tool
    (``reserve_stock``, ``charge_card``) and answers with the tool's result."""
    scripts = server.config.scripts
    scripts.add(
        r"Reserve 2 units",
        Script(
            (
                Say("Reserving."),
                CallClientTool(name="reserve_stock", args={"sku": "SKU-1", "quantity": 2}),
                Say("Reserved: {tool_result}"),
            )
        ),
    )
    scripts.add(
        r"Charge the card",
        Script(
            (
                Say("Charging."),
                CallClientTool(name="charge_card", args={"amount_cents": 500}),
                Say("Charged: {tool_result}"),
            )
        ),
    )


def chats(server: FakeCoderServer) -> list[dict[str, Any]]:
    """Every chat on the fake server: id, archived, status and its user prompts."""
    out = []
    for chat in server.model.chats.values():
        prompts = [
            "".join(p.get("text", "") for p in m.content)
            for m in chat.messages
            if m.role == "user" and not m.deleted
        ]
        out.append(
            {"id": chat.id, "archived": chat.archived, "status": chat.status, "prompts": prompts}
        )
    return out


def _detail(args: tuple[Any, ...]) -> str:
    for arg in reversed(args):
        for name in ("state", "outcome"):
            value = getattr(arg, name, None)
            if isinstance(value, str):
                return ":" + value
    return ""


class CrashingStore:
    """A store whose every write is wrapped in crash points: ``crash("before:<write>")`` and
    ``crash("after:<write>")``, ``<write>`` being the method and, for records, their state
    (``put_ledger:committing``, ``put_checkpoint:finished``...); an async store's write
    counts as done once awaited, not merely started."""

    def __init__(self, inner: Any, crash: Callable[[str], None]) -> None:
        self._inner = inner
        self._crash = crash

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._inner, name)
        if not name.startswith(("put_", "delete_", "add_", "remove_", "forget_")):
            return method
        crash = self._crash
        if inspect.iscoroutinefunction(method):

            async def awrite(*args: Any) -> Any:
                point = name + _detail(args)
                crash("before:" + point)
                result = await method(*args)
                crash("after:" + point)
                return result

            return awrite

        def write(*args: Any) -> Any:
            point = name + _detail(args)
            crash("before:" + point)
            result = method(*args)
            crash("after:" + point)
            return result

        return write


def expire_lease(db: str, schema: str | None, workflow_id: str) -> None:
    """Let the lease that a killed process left on ``workflow_id`` run out now, as it would a
    lease duration after the dead holder's last renewal: the store records it as renewed long
    ago (its own ``renew_lease``, given an earlier clock). ``db`` is an SQLite file, or with
    ``schema`` a PostgreSQL connection string."""
    store: Any = PostgresStore(db, schema=schema) if schema else SQLiteStore(db)
    with store:
        lease = store.get_lease(DEFAULT_TENANT, workflow_id)
        if lease is not None:
            long_ago = time.time() - 3600.0
            store.renew_lease(DEFAULT_TENANT, workflow_id, lease.owner, long_ago, 60.0)
