"""Protocol constants, in seconds, as data beside the machines that use them.

Sources: wire sections 1, 5, 7, 8; state machines C.1, E, H; D1, D6, D11, D35.
"""

from __future__ import annotations

import re
from typing import Final

# -- prefixes (wire 1.2) ---------------------------------------------------------------------

V2_PREFIX: Final = "/api/v2/chats"
LEGACY_PREFIX: Final = "/api/experimental/chats"
SESSION_TOKEN_HEADER: Final = "Coder-Session-Token"

# -- chat statuses (D1: an open set; unknown values are kept as strings) ---------------------

STATUS_WAITING: Final = "waiting"
STATUS_PENDING: Final = "pending"
STATUS_RUNNING: Final = "running"
STATUS_PAUSED: Final = "paused"
STATUS_COMPLETED: Final = "completed"
STATUS_ERROR: Final = "error"
STATUS_REQUIRES_ACTION: Final = "requires_action"
STATUS_INTERRUPTING: Final = "interrupting"

#: Statuses that end a segment's read loop (D1, A.10; ``paused``: D35).
TERMINAL_STATUSES: Final = frozenset(
    {STATUS_WAITING, STATUS_PAUSED, STATUS_COMPLETED, STATUS_ERROR, STATUS_REQUIRES_ACTION}
)
#: Statuses that mean "no run is going": waits, polls, archive readiness (D1; ``paused``:
#: D35, the chat stopped at a queued message under edit).
SETTLED_STATUSES: Final = frozenset({STATUS_WAITING, STATUS_PAUSED, STATUS_COMPLETED, STATUS_ERROR})

# -- stream reader (wire 5, state machines C.1) -----------------------------------------------

REDIAL_INITIAL_BACKOFF: Final = 1.0
REDIAL_BACKOFF_MULTIPLIER: Final = 2.0
REDIAL_BACKOFF_CAP: Final = 30.0
MAX_CONSECUTIVE_FAILURES: Final = 5
#: Upgrade rejections that are transient for the chat stream (D12).
TRANSIENT_UPGRADE_STATUSES: Final = frozenset({408, 425, 429})
#: Frames of at least this size must be accepted (wire 4.1; the Go SDK's read limit).
MIN_MAX_MESSAGE_SIZE: Final = 4 * 1024 * 1024
#: Our default limit for one WebSocket message; larger messages are a protocol error.
DEFAULT_MAX_MESSAGE_SIZE: Final = 64 * 1024 * 1024
#: Events per frame the server batches (wire 4.2).
SERVER_FRAME_BATCH: Final = 256

# -- segment (state machines C.1, G.3, G.5) ---------------------------------------------------

ACTION_REQUIRED_GRACE: Final = 2.0
REQUIRES_ACTION_SAFETY_VALVE: Final = 200
RECOVERY_PAGE_SIZE: Final = 200
DEFAULT_MAX_STEPS: Final = 64
"""How many steps the client-tool loop of one turn takes at most unless the agent sets
``max_steps`` (D7)."""
#: The server cancels pending client tool calls after this long (D6).
REQUIRES_ACTION_DEADLINE: Final = 300.0
#: A paused stream is closed when it stays paused longer than the deadline plus this (D6).
PAUSED_STREAM_GRACE: Final = 60.0
#: A paused stream is closed when it buffers more events than this (D6).
PAUSED_STREAM_MAX_BUFFERED: Final = 10_000

# -- session cleanup (H.4, H.5, D10, D11, D22) ------------------------------------------------

SETTLE_DEADLINE: Final = 15.0
"""The one shared deadline, in seconds, within which archiving tries every chat of a session
(H.4, D10) unless the agent sets ``settle_deadline``."""
SETTLE_RETRY_DELAY: Final = 1.0
"""The pause, in seconds, before an archive the server answered with 409 is tried again (D10)."""
INTERRUPT_WAIT_TIMEOUT: Final = 15.0
"""How long a waiting interrupt polls for the chat to settle unless given a timeout, in
seconds (D11)."""
INTERRUPT_POLL_INTERVAL: Final = 1.0
"""How often a waiting interrupt asks for the chat's status, in seconds (D11)."""
BACKGROUND_TASK_BOUND: Final = 10.0
"""The bound, in seconds, of each piece of follow-up work nobody waits for (an interrupt after
a cancelled turn, a withdrawal, closing a kept stream; D22)."""
ALREADY_ARCHIVED_MESSAGE: Final = "Chat is already archived."

# -- watch stream (wire 6) ---------------------------------------------------------------------

WATCH_INITIAL_BACKOFF: Final = 1.0
WATCH_BACKOFF_CAP: Final = 30.0

# -- uploads (wire 7) ---------------------------------------------------------------------------

MAX_ATTACHMENT_BYTES: Final = 10 * 1024 * 1024
ALLOWED_MEDIA_TYPES: Final = (
    "application/json",
    "application/pdf",
    "image/gif",
    "image/jpeg",
    "image/png",
    "image/svg+xml",
    "image/webp",
    "text/csv",
    "text/markdown",
    "text/plain",
)
MEDIA_TYPE_EXTENSIONS: Final = {
    "application/json": "json",
    "application/pdf": "pdf",
    "image/gif": "gif",
    "image/jpeg": "jpg",
    "image/png": "png",
    "image/svg+xml": "svg",
    "image/webp": "webp",
    "text/csv": "csv",
    "text/markdown": "md",
    "text/plain": "txt",
}

# -- model hints (wire 8) -----------------------------------------------------------------------

UUID_PATTERN: Final = re.compile(
    r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE
)
REASONING_EFFORTS: Final = ("none", "minimal", "low", "medium", "high", "xhigh", "max")

# -- server facts the fake reproduces (server-behaviour 8) -------------------------------------

MAX_QUEUE_SIZE: Final = 20
MAX_DYNAMIC_TOOLS: Final = 250
MAX_ATTACHMENTS_PER_CHAT: Final = 50
MAX_CREATE_BODY_BYTES: Final = 256 * 1024
MAX_TITLE_LENGTH: Final = 200
MESSAGES_LIMIT_DEFAULT: Final = 50
MESSAGES_LIMIT_MAX: Final = 200
DEFAULT_CHAT_ERROR_MESSAGE: Final = "The chat request failed unexpectedly."
