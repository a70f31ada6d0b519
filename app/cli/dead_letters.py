"""``revisit dead-letters``: messages Dramatiq gave up on, and the journal's."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.table import Table

from app.cli.common import console, fail
from app.cli.errors import kafka_refused
from app.kafka.client import PublishError, PublishRefused, read_dead_letters, replay
from app.kafka.codec import decode
from app.services.context import redis_client
from app.settings import get_settings
from queues import dramatiq_queues as dq

dead_letters_app = typer.Typer(
    rich_markup_mode=None,
    help="Dead letters: list, show, requeue or drop; the journal's dead-letter topic.",
    no_args_is_help=True,
)


def _reasons(ids: list[str]) -> list[str]:
    settings = get_settings()
    found = dq.reasons(redis_client(settings), settings.redis_namespace, ids)
    return [reason or "(not recorded)" for reason in found]


def _queues(queue: str | None) -> list[str]:
    found = dq.dead_letter_queues(redis_client(get_settings()))
    if queue is None:
        return found
    if queue not in found:
        raise fail(f"QUEUE: no dead letters in {queue!r} (queues with some: {', '.join(found)})")
    return [queue]


@dead_letters_app.command("list")
def dead_letters_list(
    queue: Annotated[str | None, typer.Argument(help="only this Dramatiq queue")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="per queue, oldest first")] = 20,
) -> None:
    """Dead letters of every Dramatiq queue (or one), with why each died."""
    settings = get_settings()
    client = redis_client(settings)
    table = Table("queue", "message id", "died", "actor", "what", "reason")
    total = 0
    for name in _queues(queue):
        letters = dq.dead_letters(client, name, limit)
        total += len(letters)
        for letter, reason in zip(letters, _reasons([x.message_id for x in letters]), strict=True):
            what = letter.kwargs.get("url") or str(letter.kwargs.get("payload", ""))[:60]
            died = datetime.fromtimestamp(letter.dead_at_ms / 1000, tz=UTC)
            when = died.isoformat(timespec="seconds")
            table.add_row(name, letter.message_id, when, letter.actor, str(what), reason)
    console.print(table)
    console.print(f"{total} dead letter(s) shown")


@dead_letters_app.command("show")
def dead_letters_show(queue: str, message_id: str) -> None:
    """One dead letter: the message as sent, and why it died."""
    letters = dq.dead_letters(redis_client(get_settings()), queue, 10_000)
    letter = next((x for x in letters if x.message_id == message_id), None)
    if letter is None:
        raise fail(f"MESSAGE_ID: no dead letter {message_id!r} in {queue!r}", code=1)
    console.print(f"reason: {_reasons([message_id])[0]}", markup=False)
    console.print(letter.raw.decode(errors="replace"), markup=False)


def _act(
    queue: str, message_ids: list[str], everything: bool, *, requeue: bool, ask: bool = False
) -> None:
    client = redis_client(get_settings())
    if everything:
        message_ids = [x.message_id for x in dq.dead_letters(client, queue, 1_000_000)]
        question = f"drop the {len(message_ids)} dead letter(s) of {queue} for good?"
        if ask and message_ids and not typer.confirm(question, err=True):
            raise fail("nothing dropped (--yes: do not ask)", code=1)
    elif not message_ids:
        raise fail("MESSAGE_IDS: give message ids, or --all")
    action = dq.requeue if requeue else dq.drop
    done = sum(action(client, queue, message_id) for message_id in message_ids)
    missing = len(message_ids) - done
    console.print(f"{'requeued' if requeue else 'dropped'} {done} message(s) of {queue}")
    if missing:
        raise fail(f"MESSAGE_IDS: {missing} of them were not dead letters of {queue!r}", code=1)


MessageIds = Annotated[list[str] | None, typer.Argument(help="message ids (see list)")]
Everything = Annotated[bool, typer.Option("--all", help="every dead letter of QUEUE")]


@dead_letters_app.command("requeue")
def dead_letters_requeue(
    queue: str, message_ids: MessageIds = None, all_: Everything = False
) -> None:
    """Send dead letters back to the end of their queue (after fixing their cause)."""
    _act(queue, message_ids or [], all_, requeue=True)


@dead_letters_app.command("drop")
def dead_letters_drop(
    queue: str,
    message_ids: MessageIds = None,
    all_: Everything = False,
    yes: Annotated[bool, typer.Option("--yes", help="with --all: do not ask")] = False,
) -> None:
    """Delete dead letters for good (--all asks first, unless --yes)."""
    _act(queue, message_ids or [], all_, requeue=False, ask=not yes)


@dead_letters_app.command("journal")
def dead_letters_journal(
    limit: Annotated[int, typer.Option(min=1, max=100_000, help="oldest first")] = 50,
    idle: Annotated[float, typer.Option(min=0.5, help="stop after this long without one")] = 3.0,
    replay_them: Annotated[
        bool,
        typer.Option(
            "--replay",
            help="publish them to the journal topic again (once their cause is fixed; "
            "applying a status twice counts once)",
        ),
    ] = False,
) -> None:
    """Messages of the journal's dead-letter topic, with why each was refused."""
    settings = get_settings()
    letters = read_dead_letters(settings, limit, idle)
    table = Table("partition", "offset", "source", "origin", "status", "reason")
    for letter in letters:
        try:
            value = decode(letter.value)
        except Exception:  # a dead letter is whatever could not be applied
            value = None
        fields = value if isinstance(value, dict) else {}
        origin, status = fields.get("origin", "(undecodable)"), fields.get("status", "")
        cells = (letter.partition, letter.offset, letter.source, origin, status, letter.reason)
        table.add_row(*map(str, cells))
    console.print(table)
    console.print(f"{len(letters)} dead letter(s) in {settings.dead_letter_topic}")
    if replay_them and letters:
        # One line says why a replay failed, not a warning per replaced producer.
        logging.getLogger("revisit.kafka").setLevel(logging.ERROR)
        refused = (
            f"--replay: {settings.journal_topic} did not take them all (fix REVISIT_JOURNAL_TOPIC "
            f"or REVISIT_KAFKA_BROKERS and run again; they stay in {settings.dead_letter_topic}): "
        )
        try:
            replay(settings, letters)
        except PublishRefused as exc:
            told = kafka_refused(exc.error, f"REVISIT_JOURNAL_TOPIC ({settings.journal_topic})")
            stay = f"the dead letters stay in {settings.dead_letter_topic}"
            raise fail(f"--replay: {told}; {stay}", 3) from exc
        except PublishError as exc:
            raise fail(f"{refused}{exc}", 3) from exc
        console.print(f"replayed {len(letters)} to {settings.journal_topic}")
