"""The Redis mirror of the scheduling pools: key layout, Lua scripts, rebuild."""
