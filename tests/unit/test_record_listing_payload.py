"""A RecordListing payload (pydantic) holds listed origins (their one msgspec declaration)."""

import json
from datetime import UTC, datetime

import pytest

from app.inputs.api import InvalidPayload, RecordListing, validated
from app.inputs.listing import ListedOriginIn

ORIGIN = {"url": "https://x/a", "visit_type": "git", "last_update": "2026-01-01T00:00:00Z"}


def payload(*origins: object) -> dict[str, object]:
    return {"lister_name": "forge", "instance_name": "one", "origins": list(origins)}


def test_a_payload_travels_as_json_and_reads_back_as_the_same_origins() -> None:
    listing = validated(RecordListing, payload(ORIGIN, {**ORIGIN, "is_fork": True}))
    sent = json.loads(json.dumps(listing.model_dump(mode="json")))
    assert validated(RecordListing, sent) == listing
    assert listing.origins[0] == ListedOriginIn(
        url="https://x/a", visit_type="git", last_update=datetime(2026, 1, 1, tzinfo=UTC)
    )


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ({**ORIGIN, "url": "x"}, "origins.1.url: Value error, URL must start with a scheme"),
        ({**ORIGIN, "colour": "red"}, "origins.1.colour: Extra inputs are not permitted"),
        ({"url": "https://x/b"}, "origins.1.visit_type: Field required"),
        ("https://x/b", "origins.1: Expected `object`, got `str`"),
    ],
)
def test_a_bad_origin_is_named_by_its_index_and_field(bad: object, reason: str) -> None:
    with pytest.raises(InvalidPayload) as info:
        validated(RecordListing, payload(ORIGIN, bad))
    assert str(info.value).startswith(f"RecordListing: {reason}")
