"""``python -m app`` runs the revisit command line."""

from app.cli import main

main()
