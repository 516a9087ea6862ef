"""coder_io_asyncio: the asyncio adapter of the Coder Agents client."""
