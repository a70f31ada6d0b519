"""The warning for journal processes that no partition is left for."""

from __future__ import annotations

from app.kafka.client import idle_members


def test_as_many_processes_as_partitions_get_no_warning() -> None:
    assert idle_members(4, 4, "journal") is None
    assert idle_members(2, 4, "journal") is None


def test_an_unknown_partition_count_gets_no_warning() -> None:
    assert idle_members(8, None, "journal") is None


def test_more_processes_than_partitions_are_counted_idle() -> None:
    assert idle_members(6, 4, "swh.journal") == (
        "6 journal processes for the 4 partitions of swh.journal: 2 will hold no partition "
        "and apply nothing (run at most as many processes as partitions, or add partitions)"
    )
    assert idle_members(2, 1, "t").startswith("2 journal processes for the 1 partition of t: 1 ")
