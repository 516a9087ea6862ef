"""Adapters that let other agent frameworks drive a Coder chat on asyncio, one module per
framework. Importing this package imports no framework; importing a module imports its
framework (an optional extra)."""
