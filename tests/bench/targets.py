"""The target of every line of the report, and its verdict.

Every suite states the targets its docstring names; this module settles the lines whose
target depends on the floor they are paired with, and gives every line the same two fields:

* ``extra["target"]``: the target in words (``"reported"`` when a line has none: stage by
  stage diagnosis, the dependencies' share of an import, the Temporal fleet's throughput);
* ``extra["meets_target"]``: ``True`` / ``False``, or ``None`` for a reported line.

The core's targets are set against the decoder each line is paired with (the core decodes
with the same one): with the standard library, a frame costs at most 1.0x ``json.loads`` of
the same frames (1.5x from WebSocket bytes); with orjson, at most 2.0x ``orjson.loads``
(2.5x from WebSocket bytes): orjson decodes several times faster than ``json.loads``, so the
core's own work weighs more against it.

The event-loop adapters' import lines are judged against ``import httpx`` and also report a
second baseline, the event loop with httpx (``extra["baseline"]``, ``extra["baseline_ratio"]``,
no verdict): ``import trio`` alone costs about 0.9x ``import httpx``, so ``imports.trio``
against ``import httpx`` mostly measures trio, and against ``import trio, httpx`` what the
library adds to what a trio program loads anyway (``tests/bench/imports.py`` says where the
rest of the import goes).
"""

from __future__ import annotations

from typing import Any

from ._common import Result

__all__ = ["CORE_TARGETS", "REPORTED", "core_target", "settle"]

#: Reported lines: measured, with no target.
REPORTED = "reported"

#: ``(stage, backend) -> x the backend's own loads of the same frames``. ``frames`` covers
#: every line that starts from frame text (``core.frames.*`` and its diagnostic stages
#: ``core.parse.*`` / ``core.reader.*``, parts of the same pipeline); ``ws`` the lines that
#: start from WebSocket bytes.
CORE_TARGETS: dict[tuple[str, str], float] = {
    ("frames", "json"): 1.0,
    ("frames", "orjson"): 2.0,
    ("ws", "json"): 1.5,
    ("ws", "orjson"): 2.5,
}

_FLOOR_NAMES = {"json": "json.loads", "orjson": "orjson.loads"}


def core_target(name: str) -> tuple[float, str] | None:
    """The target (a ratio) of a ``core.*`` line and its words, or ``None`` for any other
    line or a backend with no target."""
    stage, _, rest = name.removeprefix("core.").partition(".")
    if not name.startswith("core.") or not rest or stage == "gc":
        # ``core.gc.*`` counts collections and objects, not time: a reported line.
        return None
    backend = name.partition("+")[2] or "json"
    kind = "ws" if stage == "ws" else "frames"
    limit = CORE_TARGETS.get((kind, backend))
    if limit is None:
        return None
    return limit, f"<= {limit}x {_FLOOR_NAMES[backend]}"


def settle(result: Result) -> Result:
    """Give ``result`` its target and verdict (in place; returned for convenience)."""
    extra: dict[str, Any] = result.extra
    if "skipped" in extra:
        return result
    core = core_target(result.name)
    if core is not None:
        limit, words = core
        extra["target"] = words
        extra["meets_target"] = result.ratio is not None and result.ratio <= limit
        return result
    target = extra.get("target")
    if not target or str(target).startswith("report"):
        extra["target"] = str(target) if target else REPORTED
        extra["meets_target"] = None
    elif "meets_target" not in extra:
        # A line that could not be judged (its measurement was not comparable): its note
        # says why.
        extra["meets_target"] = None
    return result
