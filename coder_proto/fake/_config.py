"""The fake Coder server's profile: ``FakeConfig``.

It holds the timings (seconds), the legacy behaviours, the model catalog and the scripted model.
The model reads it on every use, so changing a field takes effect at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import attrs

from .._constants import MAX_QUEUE_SIZE
from ._book import ScriptBook
from ._rows import FakeModelSpec

__all__ = ["DEFAULT_MODELS", "DEFAULT_WALL_CLOCK_OFFSET", "FakeConfig"]

DEFAULT_MODELS: Final = (
    FakeModelSpec(
        model="claude-sonnet-4-6",
        display_name="Claude Sonnet 4.6",
        provider="anthropic",
        is_default=True,
    ),
    FakeModelSpec(
        model="gpt-5",
        display_name="GPT-5",
        provider="openai",
        context_limit=400_000,
        reasoning_efforts=("minimal", "low", "medium", "high"),
    ),
    FakeModelSpec(
        model="claude-opus-legacy",
        display_name="Claude Opus (disabled)",
        provider="anthropic",
        enabled=False,
    ),
)
"""The model catalog the fake serves unless its configuration names another."""

#: 2026-01-01T00:00:00Z: the wall clock of a pure model at monotonic time 0.
DEFAULT_WALL_CLOCK_OFFSET: Final = 1_767_225_600.0


def _uuid_tuple(values: Iterable[str]) -> tuple[str, ...]:
    """Ids given to the profile, lower-cased as the fake compares them."""
    return tuple(str(v).lower() for v in values)


@attrs.define(kw_only=True)
class FakeConfig:
    """The fake server's profile. Durations are seconds; tests scale them far below a
    millisecond where they like.

    * ``chunk_delay``: between two streamed parts of a model step (a ``Script`` may override).
    * ``run_start_delay``: from a run becoming ``running`` to its first model call.
    * ``interrupt_delay``: the interrupt wind-down (server-behaviour 8.7; real servers:
      usually under a second).
    * ``requires_action_timeout``: the requires_action deadline (5 minutes on real servers).
    * ``retry_base_delay`` / ``retry_max_delay``: the provider retry backoff (1 s doubling to
      60 s on real servers).
    * ``experimental_mount``: serve the chat routes under ``/api/experimental`` as well as
      ``/api/v2``, as servers of the compatibility window did (with the experimental-only
      model routes). ``False`` is the newest server: the experimental prefix answers 404 (D36).
    * ``legacy_only``: serve only ``/api/experimental`` (``/api/v2`` answers 404), with the
      legacy model-config route and no organization model route (D16).
    * ``stamp_promotions``: stamp ``queued_message_id`` on promoted user messages (D8);
      ``False`` is the older servers' behaviour.
    * ``coordinates``: stamp ``message_part`` events with ``history_version``,
      ``generation_attempt`` and ``seq`` (D14); ``False`` is the legacy profile.
    * ``zero_value_keys``: serialise ``"text": ""``, ``"url": ""`` ... on every part, as Go
      does (wire 3.5).
    * ``html_escape``: escape ``<``, ``>`` and ``&`` in JSON strings as Go's encoder does.
    * ``message_id_gaps``: advance the global message id by 1-3 per row, as other chats'
      rows would, so ids are never contiguous (server-behaviour 8.12).
    * ``legacy_envelopes``: wrap stream frames as ``{"type": "data", "data": [...]}`` and send
      ``{"type": "ping", "data": null}`` frames every ``envelope_ping_interval``, as very old
      experimental servers did (server-behaviour 9.5; the client unwraps them: D13).
    * ``part_buffer_bytes``: how much of a generation attempt's streamed parts the server keeps
      for sockets that connect late (server-behaviour 3.3: about 1 MB); parts past it are
      streamed to no one who joins later, as on the real server.
    * ``workspace_ids`` and ``mcp_server_ids``: the workspaces and MCP servers that exist, as
      UUIDs. A chat may name only these (the real server refuses ids it cannot find: 400); the
      fake has none unless told.
    * ``models``: the model catalog (``FakeModelSpec``), in listing order.
    * ``access_url`` and ``build_version``: what ``/api/v2/buildinfo`` reports (the served fake
      sets ``access_url`` to its own URL).
    """

    seed: int = 0
    token: str = attrs.field(default="fake-coder-session-token", repr=False)
    organization_id: str | None = None
    username: str = "fake-user"
    wall_clock_offset: float = DEFAULT_WALL_CLOCK_OFFSET
    chunk_delay: float = 0.002
    run_start_delay: float = 0.0
    interrupt_delay: float = 0.02
    requires_action_timeout: float = 300.0
    retry_base_delay: float = 0.01
    retry_max_delay: float = 0.5
    experimental_mount: bool = False
    legacy_only: bool = False
    stamp_promotions: bool = True
    coordinates: bool = True
    zero_value_keys: bool = True
    html_escape: bool = True
    message_id_gaps: bool = True
    legacy_envelopes: bool = False
    envelope_ping_interval: float = 15.0
    require_upload_filename: bool = True
    max_queue: int = MAX_QUEUE_SIZE
    part_buffer_bytes: int = 1_000_000
    workspace_ids: tuple[str, ...] = attrs.field(default=(), converter=_uuid_tuple)
    mcp_server_ids: tuple[str, ...] = attrs.field(default=(), converter=_uuid_tuple)
    models: tuple[FakeModelSpec, ...] = DEFAULT_MODELS
    scripts: ScriptBook = attrs.Factory(ScriptBook)
    access_url: str = ""
    build_version: str = "v2.31.0+fake"
