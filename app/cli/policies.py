"""``revisit policy`` and ``revisit schedule``: how each visit type's batches are picked."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from app.cli.common import connected, console, fail, now, require_visit_type, visit_types_of
from app.cli.errors import broker_unreachable
from app.db.connection import connect
from app.db.policies import (
    OLDEST_SCHEDULED,
    oldest_scheduled_index_ready,
    oldest_scheduled_index_wanted,
    policies_of,
    set_policies,
)
from app.db.scheduling import visit_type_configs
from app.domain.policies import UnknownPolicy, check_policies
from app.domain.queue_names import slow_queue, visit_queue
from app.services.context import redis_client
from app.services.scheduler_step import VisitLimits, lane_sends, limits_of
from app.services.scheduling import VisitOrder, schedule_step
from app.settings import get_settings
from queues.dramatiq_broker import enqueue_many, queue_depth, redis_broker, visit_message
from queues.errors import UNAVAILABLE
from queues.workers import capacities

policy_app = typer.Typer(
    rich_markup_mode=None, help="Scheduling policies per visit type.", no_args_is_help=True
)


def schedule(
    visit_type: str,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="only show what would be picked")
    ] = False,
    n: Annotated[int, typer.Option("-n", min=1, help="how many visits")] = 10,
) -> None:
    """Show (--dry-run) or send now the next N visits of VISIT_TYPE, with the
    policy that picks each.

    Without --dry-run the visits go to the visit type's express and slow
    queues, as the scheduler would send them (the slow lane only while a worker
    serves it; beyond max_queue_length, but never more than max_queue_length
    at once). A dry run writes nothing: on a
    missing mirror it says so instead of rebuilding it.
    """
    with connected() as (conn, ctx):
        visit_types_of(conn, visit_type)
        config = visit_type_configs(conn)[visit_type]
        if n > config.max_queue_length:
            console.print(
                f"-n {n}: capped at {visit_type}'s max_queue_length, {config.max_queue_length}"
            )
            n = config.max_queue_length
        if corrupt := ctx.mirror.corruptions(visit_type, members=False):
            raise fail(f"{visit_type}: the mirror holds {corrupt[0]}; nothing was scheduled", 1)
        if not dry_run:
            _check_broker(visit_type)  # before anything is stamped scheduled
        policies = policies_of(conn, visit_type)
        result = schedule_step(conn, ctx, visit_type, n, now(), policies, dry_run=dry_run)
    if result.waiting_for_rebuild:
        console.print(result.waiting_for_rebuild)
        return
    table = Table("#", "url", "policy", *(() if dry_run else ("lane",)))
    lanes = {} if dry_run else _send(limits_of(config), visit_type, result.orders)
    for rank, order in enumerate(result.orders):
        table.add_row(str(rank), order.url, order.policy, *lanes.get(order.origin_id, ()))
    console.print(table)
    if not dry_run:
        console.print(f"sent {len(result.orders)} visits of {visit_type} to its workers")


def _check_broker(visit_type: str) -> None:
    """Refuse, naming the broker's setting, when its Redis cannot be reached:
    visits picked then would be stamped scheduled and held in flight with no
    message sent (the scheduled cooldown, a week)."""
    try:
        queue_depth(redis_broker(get_settings()), visit_queue(visit_type))
    except UNAVAILABLE as exc:
        raise fail(broker_unreachable(exc) + "; nothing was scheduled", code=3) from exc


def _send(limits: VisitLimits, visit_type: str, orders: list[VisitOrder]) -> dict[int, tuple[str]]:
    """Send ``orders`` to the express and slow lanes as the scheduler does (the slow
    lane only while a worker serves it), with the visit type's ``limits``; the lane
    of each origin."""
    settings = get_settings()
    slow_q = slow_queue(visit_type)
    served = capacities(redis_client(settings), settings.redis_namespace, [slow_q])[slow_q].threads
    sends = lane_sends(settings, visit_type, limits, orders, len(orders), served > 0)
    messages = [visit_message(s.queue, s.order, s.lane, s.time_limit_s, s.limits) for s in sends]
    enqueue_many(redis_broker(settings), messages)
    return {s.order.origin_id: (s.lane,) for s in sends}


@policy_app.command("show")
def policy_show() -> None:
    """The policies and weights of every visit type."""
    table = Table("visit type", "policy", "weight")
    with connect(get_settings()) as conn:
        for vt in visit_type_configs(conn):
            for policy, weight in policies_of(conn, vt).items():
                table.add_row(vt, policy, f"{weight:g}")
        missing = oldest_scheduled_index_wanted(conn) and not oldest_scheduled_index_ready(conn)
    console.print(table)
    if missing:
        console.print(
            f"warning: the index that {OLDEST_SCHEDULED} reads is missing or invalid, so its"
            " query scans the table; `revisit policy set` of that visit type builds it again"
        )


@policy_app.command("set")
def policy_set(
    visit_type: str,
    weights: Annotated[list[str], typer.Argument(help="POLICY=WEIGHT ...")],
) -> None:
    """Replace the policies of VISIT_TYPE, e.g. never_visited_oldest_update_first=60."""
    parsed: dict[str, float] = {}
    for item in weights:
        name, sep, value = item.partition("=")
        try:
            parsed[name] = float(value) if sep else float("nan")
        except ValueError:
            parsed[name] = float("nan")
        if parsed[name] != parsed[name]:
            raise fail(f"WEIGHTS: expected POLICY=WEIGHT with a number, got {item!r}")
    try:
        check_policies(parsed)
    except UnknownPolicy as exc:
        raise fail(str(exc)) from exc
    with connect(get_settings()) as conn:
        require_visit_type(conn, visit_type, "VISIT_TYPE")
        had_index = oldest_scheduled_index_ready(conn)
        if OLDEST_SCHEDULED in parsed and not had_index:
            console.print(
                f"building the index that {OLDEST_SCHEDULED} reads, concurrently"
                " (minutes on a large table; the scheduler goes on meanwhile)"
            )
        set_policies(conn, visit_type, parsed)
        has_index = oldest_scheduled_index_ready(conn)
    console.print(f"{visit_type}: {', '.join(f'{k}={v:g}' for k, v in parsed.items())}")
    if had_index and not has_index:
        console.print(f"dropped the index of {OLDEST_SCHEDULED}: no visit type uses it now")
