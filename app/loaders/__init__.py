"""Loaders: visit one origin and say what was found."""
