"""The run: the matrix, lanes side by side, one probe on one target, fail-fast, a running pooler."""
