"""SQL of revisit: numbered migrations and named queries, shipped as package data."""
