"""Dramatiq actors and the long-running loops (scheduler, journal client): thin adapters."""
