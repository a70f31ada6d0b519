import pytest

from app.domain import ladder


@pytest.mark.parametrize(
    ("index", "days"),
    [(0, 1), (1, 1), (2, 2), (3, 2), (4, 2), (5, 4), (6, 16), (7, 64), (8, 256), (9, 1024)],
)
def test_ladder_interval_follows_seed_000(index: int, days: float) -> None:
    assert ladder.interval_units(index) == days


def test_negative_ladder_index_is_refused() -> None:
    with pytest.raises(ValueError, match="ladder index"):
        ladder.interval_units(-1)


@pytest.mark.parametrize(("max_days", "top"), [(1, 1), (2, 4), (3.9, 4), (4, 5), (64, 7), (100, 7)])
def test_max_index_is_the_last_rung_within_the_maximum_interval(max_days: float, top: int) -> None:
    assert ladder.max_index(max_days) == top


def test_clamp_keeps_the_index_within_bounds() -> None:
    assert ladder.clamp_index(-3, 7) == 0
    assert ladder.clamp_index(9, 7) == 7
    assert ladder.clamp_index(5, 7) == 5
