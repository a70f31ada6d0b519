"""PostgreSQL adapter: the source of truth."""
