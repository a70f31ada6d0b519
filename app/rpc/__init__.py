"""A server for the reference scheduler's RPC protocol (``swh.core.api``)."""
