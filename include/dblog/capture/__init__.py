"""Continuous change capture: a source's log becomes staged segments under a fenced checkpoint."""
