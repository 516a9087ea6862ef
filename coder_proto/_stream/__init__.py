"""The WebSocket streams: the sans-I/O WebSocket client, the per-turn stream reader (redials,
replay dedup), the translator into output parts, queued-prompt promotion, usage summation,
the session's retained stream, and the ``/watch`` machine."""
