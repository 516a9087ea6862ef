"""Embedding the sans-I/O core in a loop of your own: the template is
``examples/custom_loop/selectors_loop.py``."""
