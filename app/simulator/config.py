"""The simulated world: a config file (TOML or JSON) validated by pydantic.

Every random draw of a run derives from ``seed``, so one file and one seed
give one report. Rates are per day, durations in seconds, times relative to
``start``.
"""

from __future__ import annotations

import json
import math
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from app.inputs.api import first_error
from app.services.context import TUNING_KNOBS

#: What a world may override: the ladder unit (a setting) and the research knobs
#: (app.services.context.Tuning).
KNOBS = TUNING_KNOBS | {"ladder_unit_s"}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RateDistribution(_Model):
    """Hidden Poisson change rates, log-uniform between the two bounds (per day)."""

    min_per_day: float = Field(default=1 / 3650, gt=0, description="once in 10 years")
    max_per_day: float = Field(default=10.0, gt=0, description="10 times a day")

    @model_validator(mode="after")
    def _ordered(self) -> RateDistribution:
        if self.min_per_day > self.max_per_day:
            raise ValueError("min_per_day must not exceed max_per_day")
        return self


class Shares(_Model):
    """Shares of origins that do not follow a plain Poisson process; the rest do."""

    dormant: float = Field(default=0.05, ge=0, le=1, description="silent, then wake up")
    bursty: float = Field(default=0.05, ge=0, le=1, description="changes come in bursts")
    dead: float = Field(default=0.03, ge=0, le=1, description="listed, visits find not_found")
    flaky: float = Field(default=0.05, ge=0, le=1, description="visits fail now and then")

    @model_validator(mode="after")
    def _at_most_one(self) -> Shares:
        if self.dormant + self.bursty + self.dead + self.flaky > 1:
            raise ValueError("dormant + bursty + dead + flaky must not exceed 1")
        return self


class Outage(_Model):
    """A forge down for ``days`` from ``start_day`` (days after the run's start): every
    visit of its origins fails, and its lister cannot list until it is back."""

    start_day: float = Field(ge=0)
    days: float = Field(gt=0)


class Lister(_Model):
    """A forge's lister: a full listing every ``period_hours``, seeing the forge as it
    was ``delay_hours`` earlier; ``reports_last_update`` says whether it reports
    each origin's last change."""

    name: str = Field(min_length=1, pattern=r"^[a-z][a-z0-9_-]*$")
    share: float = Field(gt=0, description="share of the visit type's origins it lists")
    reports_last_update: bool = True
    period_hours: float = Field(default=24.0, gt=0)
    delay_hours: float = Field(default=0.0, ge=0)
    outages: list[Outage] = Field(default_factory=list)

    def down(self, days_since_start: float) -> bool:
        """Whether the forge is in an outage that many days after the run's start."""
        return any(o.start_day <= days_since_start < o.start_day + o.days for o in self.outages)


class Loader(_Model):
    """Visit durations (the reference simulator's model, scaled) and failures.

    duration = scale * size * min(cap_s, base_s + per_commit_s * new commits), where
    ``size`` is 1, or with ``size_tail_alpha`` set each origin's own draw from a
    Pareto law of that shape scaled to mean 1 and capped at ``size_max`` (large
    repositories are slow to visit every time: heavy-tailed durations). A small
    world is a scale model of a large one: ``scale`` makes each visit as
    costly to W workers serving N origins as it would be to scale * W workers
    serving scale * N. The default world (2,000 git origins, 4 workers, scale
    300) stands for 600,000 origins and 1,200 workers: about 0.2 visits per
    origin per day, scarcer than the ladder's daily interval asks for.

    A visit that would take longer than ``cap_s`` (the loader's time limit) is
    cut there and ends ``partial``: it saves the whole changes it fetched in
    that time (at least one) and leaves the rest to the next visit, as the
    reference simulator's loader ends such a visit partial without the rest.
    """

    base_s: float = Field(default=0.5, ge=0)
    per_commit_s: float = Field(default=0.1, ge=0)
    cap_s: float = Field(default=30.0, gt=0)
    scale: float = Field(default=300.0, gt=0)
    commits_per_change: float = Field(default=3.0, ge=1, description="mean; at least 1")
    initial_commits: float = Field(default=200.0, ge=1, description="mean history size")
    flaky_failure_probability: float = Field(default=0.3, ge=0, le=1)
    size_tail_alpha: float | None = Field(
        default=None, gt=1, description="Pareto shape of origin sizes (none: all alike)"
    )
    size_max: float = Field(default=20.0, ge=1, description="largest size factor")

    def fetchable_commits(self) -> float:
        """The most new commits one visit fetches before the cap cuts it."""
        if self.per_commit_s <= 0:
            return math.inf
        return max(0.0, self.cap_s - self.base_s) / self.per_commit_s

    def visit_s(self, commits: float, size: float = 1.0) -> float:
        """Worker seconds of a successful visit fetching ``commits`` new commits."""
        return self.scale * size * min(self.cap_s, self.base_s + self.per_commit_s * commits)


class VisitTypeWorld(_Model):
    """The origins of one visit type, its workers and its listers."""

    name: str = Field(default="git", min_length=1)
    origins: int = Field(default=2000, ge=0, description="origins at the start")
    workers: int = Field(default=4, ge=0, description="loader workers for recurrent visits")
    prefetch: int | None = Field(
        default=None, ge=0, description="queued visits beyond the workers (default: workers)"
    )
    request_workers: int = Field(default=1, ge=0, description="workers for one-shot requests")
    requests_per_day: float = Field(default=2.0, ge=0, description="save code now requests")
    new_origins_per_day: float = Field(default=10.0, ge=0)
    disappearing_per_day: float = Field(
        default=0.0005, ge=0, le=1, description="share of origins leaving their forge per day"
    )
    rates: RateDistribution = Field(default_factory=RateDistribution)
    shares: Shares = Field(default_factory=Shares)
    listers: list[Lister] = Field(
        default_factory=lambda: [
            Lister(name="forge", share=0.7, reports_last_update=True, delay_hours=2.0),
            Lister(name="registry", share=0.3, reports_last_update=False, period_hours=72.0),
        ],
        min_length=1,
    )
    policies: dict[str, float] | None = Field(
        default=None, description="policy weights; none: the project's defaults"
    )
    dormant_wake_days: list[float] = Field(
        default_factory=list,
        description="dormant origins wake together within a day after one of these days "
        "(days after the start); none: each at a random time of the run",
    )
    dormant_bursty: bool = Field(
        default=False, description="once awake, dormant origins change in bursts"
    )

    @property
    def queue_length(self) -> int:
        """Visits in the system the scheduler keeps: running plus queued."""
        return self.workers + (self.workers if self.prefetch is None else self.prefetch)


class WorldConfig(_Model):
    """A whole simulated world and how to run and measure it."""

    seed: int = 0
    start: datetime = datetime(2025, 1, 1, tzinfo=UTC)
    step_minutes: float = Field(default=15.0, gt=0, description="simulated time per step")
    burn_in_days: float = Field(default=7.0, ge=0, description="not measured")
    starvation_bound_days: float = Field(default=30.0, gt=0)
    warm_start_days: float = Field(
        default=30.0,
        ge=0,
        description="each origin existing at the start was visited once at a random time "
        "this many days before it (0: the archive starts empty)",
    )
    loader: Loader = Field(default_factory=Loader)
    oracle_rates: bool = Field(
        default=False,
        description="the policies plan with each origin's true change rate at the moment "
        "instead of learning it (the oracle_planner diagnostic: what learning the rates costs)",
    )
    rate_only_oracle: bool = Field(
        default=False,
        description="the recurrent visits follow the rate-only age-optimal allocation of the "
        "true change rates instead of the policies (the oracle baseline, app.simulator.oracle)",
    )
    round_robin: bool = Field(
        default=False,
        description="the recurrent visits go to the origin longest without a successful "
        "visit instead of following the policies: every origin equally often (the "
        "round_robin baseline, app.simulator.oracle)",
    )
    visit_types: list[VisitTypeWorld] = Field(
        default_factory=lambda: [
            VisitTypeWorld(),
            VisitTypeWorld(name="hg", origins=500, workers=1, new_origins_per_day=2.5),
        ],
        min_length=1,
    )
    settings: dict[str, float] = Field(
        default_factory=dict, description=f"scheduler settings to override: {sorted(KNOBS)}"
    )

    @model_validator(mode="after")
    def _check(self) -> WorldConfig:
        if self.start.tzinfo is None:
            raise ValueError("start: needs a time zone")
        unknown = sorted(set(self.settings) - KNOBS)
        if unknown:
            raise ValueError(f"settings: cannot override {unknown} (allowed: {sorted(KNOBS)})")
        names = [vt.name for vt in self.visit_types]
        if len(set(names)) != len(names):
            raise ValueError("visit_types: each name once")
        if self.rate_only_oracle and self.round_robin:
            raise ValueError("round_robin: one baseline at a time, not with rate_only_oracle")
        for vt in self.visit_types:
            listers = [lister.name for lister in vt.listers]
            if len(set(listers)) != len(listers):
                raise ValueError(f"visit_types.{vt.name}.listers: each name once")
        return self


class ConfigError(ValueError):
    """A world file that cannot be used; the text names the field."""


def load_config(path: Path) -> WorldConfig:
    """Read a world from a ``.toml`` or ``.json`` file."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror}") from exc
    try:
        raw: Any = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    try:
        return WorldConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {first_error(exc, 'world')}") from exc
