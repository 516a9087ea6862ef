"""Agent turns: the session, the turn (the client-tool loop), the segment (one model round
trip), prompts and client tools, and the agent core every adapter's ``CoderAgent`` wraps."""
