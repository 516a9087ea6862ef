"""coder_io_trio: the trio adapter of the Coder Agents client."""
