"""Embedding the sans-I/O core in a loop of your own: ``selectors_loop`` is the template."""
