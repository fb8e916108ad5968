"""The ``freshet`` command."""
