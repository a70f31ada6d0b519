"""A simulator that drives revisit's own scheduling code under a simulated clock.

``config`` describes a world (a TOML or JSON file), ``world`` draws its hidden
change processes from a seeded RNG, ``engine`` runs the production listing,
scheduling and journal code against it with simulated workers, ``truth``
measures what the archive holds against what the forges hold, ``oracle``
schedules the ``oracle`` baseline (the rate-only allocation of the true
change rates) in place of the policies, ``bound``
computes a clairvoyant lower bound on the mean age the same workers could reach,
and ``report`` writes the JSON report and the plots.
"""
