"""revisit: decides which software origin each loader worker visits next."""
