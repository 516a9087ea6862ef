"""Adapters that let other agent frameworks drive a Coder chat (``docs/integrations/``).

Each integration is a module of its own that imports its framework when it is imported;
importing ``coder_io_asyncio`` imports none of them.
"""
