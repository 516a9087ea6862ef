"""The parts of the ``coder-agent`` command line beyond the dispatcher in
``coder_integrations.cli``: what a terminal shows while a turn runs (``screen``), client tools
loaded from a Python module (``tools``), the interactive ``chat`` session (``chat``) and
``chats watch`` (``watch``). Private: the command line is the interface."""
