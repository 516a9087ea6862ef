"""Transcripts: what crossed the wire in one agent session, as versioned JSON lines
(docs/architecture.md "Beyond the reference"; rule 6: secrets stay out).

A transcript is UTF-8 text, one JSON object per line. The first line is the header
(``kind: "header"``: format name, format version, library version, creation time supplied by
the caller, the base URL without credentials, and the session settings replay needs); every
other line is one record with a ``kind`` and a time ``t`` in seconds relative to the moment
recording began:

==============  ===============================================================================
kind            what happened
==============  ===============================================================================
``turn``        a turn started (``generate``/``stream``, the prompt, tool overrides)
``rest``        one REST exchange: op, method, path with query, request JSON (or its byte
                length), status, response JSON (or text, or byte length), or a network error,
                or ``cancelled``
``ws_open``     a WebSocket connection was dialled (its URL, without credentials)
``ws_accept``   the upgrade was accepted
``ws_frame``    one received text frame, verbatim
``ws_close``    the server's close frame (code, reason)
``ws_reject``   the upgrade was answered with an HTTP status (and its body)
``ws_error``    the server broke the WebSocket protocol
``ws_end``      the connection ended: ``lost`` (end of stream), ``failed`` (socket error) or
                ``closed`` (by the client)
``tools``       client tools ran: the calls and their outcomes
``cancel``      the caller cancelled the running turn (D22)
``call``        a session call: ``interrupt``, ``archive``, ``dispose``, ``reset_session``
``turn_end``    the live outcome of the turn, for comparison with a replay
==============  ===============================================================================

No record type has a field for headers, and URLs are stored without user info or a
``coder_session_token`` query parameter, so a transcript cannot carry the session token
(``tests/proto/transcript/test_transcript.py`` checks both). ``docs/transcripts.md`` documents
every field.

``TranscriptRecorder`` turns an adapter's observations (the ``Recorder`` protocol: one call per
REST exchange, per chunk of received bytes, per tool run...) into records; ``parse_transcript``
is the strict reader (``TranscriptError`` with the line number for anything malformed,
``TranscriptVersionError`` for a newer format); ``replay`` runs a transcript through the core
offline.
"""

from typing import TYPE_CHECKING

from coder_proto._lazy import lazy_exports

if TYPE_CHECKING:
    from .._recording import Recorder as Recorder
    from ._fields import TranscriptError as TranscriptError
    from ._fields import TranscriptVersionError as TranscriptVersionError
    from ._format import Transcript as Transcript
    from ._format import TranscriptWriter as TranscriptWriter
    from ._format import parse_transcript as parse_transcript
    from ._outcomes import outcome_summary as outcome_summary
    from ._recorder import TranscriptRecorder as TranscriptRecorder
    from ._records import FORMAT_NAME as FORMAT_NAME
    from ._records import FORMAT_VERSION as FORMAT_VERSION
    from ._records import Cancel as Cancel
    from ._records import Header as Header
    from ._records import Record as Record
    from ._records import RestExchange as RestExchange
    from ._records import SessionCall as SessionCall
    from ._records import ToolRunRecord as ToolRunRecord
    from ._records import TranscriptSettings as TranscriptSettings
    from ._records import TurnEnd as TurnEnd
    from ._records import TurnStarted as TurnStarted
    from ._records import WsAccept as WsAccept
    from ._records import WsClose as WsClose
    from ._records import WsEnd as WsEnd
    from ._records import WsError as WsError
    from ._records import WsFrame as WsFrame
    from ._records import WsOpenRecord as WsOpenRecord
    from ._records import WsReject as WsReject
    from ._replay import NOT_RECORDED as NOT_RECORDED
    from ._replay import ReplayResult as ReplayResult
    from ._replay import ReplayTurn as ReplayTurn
    from ._replay import replay as replay

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "NOT_RECORDED",
    "Cancel",
    "Header",
    "Record",
    "Recorder",
    "ReplayResult",
    "ReplayTurn",
    "RestExchange",
    "SessionCall",
    "ToolRunRecord",
    "Transcript",
    "TranscriptError",
    "TranscriptRecorder",
    "TranscriptSettings",
    "TranscriptVersionError",
    "TranscriptWriter",
    "TurnEnd",
    "TurnStarted",
    "WsAccept",
    "WsClose",
    "WsEnd",
    "WsError",
    "WsFrame",
    "WsOpenRecord",
    "WsReject",
    "outcome_summary",
    "parse_transcript",
    "replay",
]

# Each name is imported on first use (``coder_proto._lazy``): an agent reaches the
# ``Recorder`` protocol without loading the format, the records and replay.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "._fields": (
            "TranscriptError",
            "TranscriptVersionError",
        ),
        "._format": (
            "Transcript",
            "TranscriptWriter",
            "parse_transcript",
        ),
        "._outcomes": ("outcome_summary",),
        "coder_proto._recording": ("Recorder",),
        "._recorder": ("TranscriptRecorder",),
        "._records": (
            "FORMAT_NAME",
            "FORMAT_VERSION",
            "Cancel",
            "Header",
            "Record",
            "RestExchange",
            "SessionCall",
            "ToolRunRecord",
            "TranscriptSettings",
            "TurnEnd",
            "TurnStarted",
            "WsAccept",
            "WsClose",
            "WsEnd",
            "WsError",
            "WsFrame",
            "WsOpenRecord",
            "WsReject",
        ),
        "._replay": (
            "NOT_RECORDED",
            "ReplayResult",
            "ReplayTurn",
            "replay",
        ),
    },
)
