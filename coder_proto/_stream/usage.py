"""Usage summation: per-message wire usage into one segment's usage, and steps into a turn's
(state machines F.1-F.5; D17).

The server stamps usage on every assistant message it commits, one per internal model step,
and re-sends the full snapshot on every replay and revision. ``UsageAccumulator`` keys usage by
message id so that any number of replays counts once, sums the counters, and normalises the
result to :class:`~coder_proto.Usage` (cache tokens added back into the input total).
``sum_usage`` adds the steps of a whole turn (client-tool segments) field by field.

Which messages count (assistant only, id above the effective cursor) is the translator's
decision (F.4); the accumulator records what it is given.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from .._outputs import Usage
from .._wire.messages import USAGE_SUM_FIELDS, ChatMessageUsage

__all__ = ["COST_FIELDS", "UsageAccumulator", "provider_metadata_from_raw", "sum_usage"]

#: Wire fields mirrored under ``provider_metadata["coder"]`` when present (F.3, D17).
COST_FIELDS: Final = ("total_cost_micros", "total_runtime_ms")


def _is_number(value: Any) -> bool:
    # JSON booleans are not numbers, although Python's bool is an int.
    return type(value) is int or type(value) is float


def _as_count(value: Any) -> int | None:
    """A token count for the normalised shape: ints, and floats that are integral."""
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():
        return int(value)
    return None


class UsageAccumulator:
    """Per-segment usage, keyed by message id (F.1-F.4).

    ``record`` keeps the latest snapshot per message id (a revision or replay replaces it; a
    snapshot without usage is simply not recorded). ``raw`` aggregates: the counters of
    ``USAGE_SUM_FIELDS`` are summed; ``context_limit``, unknown fields, and sum fields for
    which no message reported a number take the value of the highest message id reporting
    them. The result is independent of the order and duplication of replays.
    """

    __slots__ = ("_by_id",)

    def __init__(self) -> None:
        self._by_id: dict[int, dict[str, Any]] = {}

    def record(self, message_id: int, usage: ChatMessageUsage) -> None:
        """Store ``usage`` as message ``message_id``'s usage, replacing any earlier snapshot
        of the same id (F.1 "latest snapshot wins", F.4)."""
        # ``to_json`` is the wire object as received (unknown fields included). JSON nulls are
        # treated as absent: the server omits a field it does not know.
        self._by_id[message_id] = {k: v for k, v in usage.to_json().items() if v is not None}

    def forget_through(self, message_id: int) -> None:
        """Drop the usage of every message with id <= ``message_id``: the effective cursor
        moved past them (D3 exemption), and usage counts only above it (F.4)."""
        for key in [k for k in self._by_id if k <= message_id]:
            del self._by_id[key]

    @property
    def message_ids(self) -> tuple[int, ...]:
        """The message ids whose usage is recorded, ascending."""
        return tuple(sorted(self._by_id))

    def raw(self) -> dict[str, Any] | None:
        """The accumulated wire usage (snake_case, ``input_tokens`` uncached), or ``None``
        when no message reported usage (F.1, F.2 ``raw``)."""
        if not self._by_id:
            return None
        sums: dict[str, int | float] = {}
        newest: dict[str, tuple[int, Any]] = {}
        for message_id in sorted(self._by_id):
            for key, value in self._by_id[message_id].items():
                if key in USAGE_SUM_FIELDS and _is_number(value):
                    sums[key] = sums.get(key, 0) + value
                else:
                    # Ascending ids: the last writer is the highest id reporting the key.
                    newest[key] = (message_id, value)
        out: dict[str, Any] = {}
        for key, (_, value) in newest.items():
            if key not in sums:
                out[key] = value
        out.update(sums)
        return out

    def usage(self) -> Usage:
        """The normalised usage of the segment (F.2); ``Usage.raw`` is :meth:`raw`.

        ``input_tokens`` is uncached + cache read + cache write (``None`` only when all three
        are unknown); ``no_cache_tokens`` is the wire ``input_tokens``; ``text_tokens`` is
        always ``None``. A counter that is not an integral number is ``None`` here and kept
        as received in ``raw``.
        """
        raw = self.raw()
        if raw is None:
            return Usage()
        uncached = _as_count(raw.get("input_tokens"))
        cache_read = _as_count(raw.get("cache_read_tokens"))
        cache_write = _as_count(raw.get("cache_creation_tokens"))
        parts = [v for v in (uncached, cache_read, cache_write) if v is not None]
        return Usage(
            input_tokens=sum(parts) if parts else None,
            no_cache_tokens=uncached,
            cache_read_tokens=cache_read,
            cache_write_tokens=cache_write,
            output_tokens=_as_count(raw.get("output_tokens")),
            reasoning_tokens=_as_count(raw.get("reasoning_tokens")),
            text_tokens=None,
            raw=raw,
        )

    def provider_metadata(self) -> dict[str, Any] | None:
        """``{"coder": {...}}`` with the summed cost/runtime fields the wire sent, or
        ``None`` when it sent neither (F.3, D17)."""
        raw = self.raw()
        if raw is None:
            return None
        return provider_metadata_from_raw(raw)


def provider_metadata_from_raw(raw: Mapping[str, Any]) -> dict[str, Any] | None:
    """F.3 on an accumulated wire usage object."""
    coder = {key: raw[key] for key in COST_FIELDS if key in raw}
    return {"coder": coder} if coder else None


def sum_usage(usages: Iterable[Usage]) -> Usage:
    """The turn's usage: the field-wise sum of its steps' usages (F.5, D17).

    Per field, none + none = none; otherwise a missing value counts as 0. The sum has no
    ``raw`` (raw usage is per step). An empty iterable gives an all-``None`` usage.
    """
    total = Usage()
    for usage in usages:
        total = total + usage
    return total
