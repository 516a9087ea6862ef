"""Coder agents inside other Python frameworks, blocking (``docs/integrations/``).

Each module here imports its framework when it is imported itself, never before: importing
``coder_io_sync`` imports none of them.
"""
