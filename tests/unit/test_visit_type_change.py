import pytest
from pydantic import ValidationError

from app.domain.lanes import MAX_TIME_LIMIT_S
from app.services.visit_types import VisitTypeChange


def test_a_time_limit_beyond_the_longest_visit_is_refused_naming_the_field() -> None:
    assert VisitTypeChange(name="svn", time_limit_s=MAX_TIME_LIMIT_S).time_limit_s == 4 * 3600
    with pytest.raises(ValidationError, match="time_limit_s"):
        VisitTypeChange(name="svn", time_limit_s=MAX_TIME_LIMIT_S + 1)


def test_the_references_hyphenated_names_are_accepted_and_a_queue_breaking_one_refused() -> None:
    for name in ("git-checkout", "hg-checkout", "svn-export", "tarball-directory"):
        assert VisitTypeChange(name=name).name == name
    with pytest.raises(ValidationError, match="cannot name a visit type"):
        VisitTypeChange(name="svn export")
