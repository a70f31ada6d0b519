"""The lister interface (the reference scheduler's), lister plugins and their recurrent runs."""
