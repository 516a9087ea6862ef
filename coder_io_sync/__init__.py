"""coder_io_sync: the sync adapter of the Coder Agents client."""
