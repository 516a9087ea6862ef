"""A web chat on the AI SDK's ``useChat``, backed by Coder agent turns (see ``app.py``)."""
