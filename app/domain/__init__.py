"""Pure scheduling policy: no I/O; ``now`` and the random generator are parameters."""
