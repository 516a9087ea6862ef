"""Integrations of the asyncio adapter with agent frameworks, one module each.

Each module imports its framework when it is imported itself, never before: importing
``coder_io_asyncio`` imports none of them.
"""
