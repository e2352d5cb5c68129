"""A run's inputs: the options, matrix files, and the preflight that checks them before any server starts."""
