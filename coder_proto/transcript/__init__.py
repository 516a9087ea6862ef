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
(``tests/test_transcript.py`` checks both). ``docs/transcripts.md`` documents every field.

``TranscriptRecorder`` turns an adapter's observations (the ``Recorder`` protocol: one call per
REST exchange, per chunk of received bytes, per tool run...) into records; ``parse_transcript``
is the strict reader (``TranscriptError`` with the line number for anything malformed,
``TranscriptVersionError`` for a newer format); ``replay`` runs a transcript through the core
offline.
"""

from ._fields import TranscriptError, TranscriptVersionError
from ._format import Transcript, TranscriptWriter, parse_transcript
from ._outcomes import outcome_summary
from ._recorder import Recorder, TranscriptRecorder
from ._records import (
    FORMAT_NAME,
    FORMAT_VERSION,
    Cancel,
    Header,
    Record,
    RestExchange,
    SessionCall,
    ToolRunRecord,
    TranscriptSettings,
    TurnEnd,
    TurnStarted,
    WsAccept,
    WsClose,
    WsEnd,
    WsError,
    WsFrame,
    WsOpenRecord,
    WsReject,
)
from ._replay import NOT_RECORDED, ReplayResult, ReplayTurn, replay

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
