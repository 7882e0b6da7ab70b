"""The commands of ``rocktimer`` and its entry point (``main``: one line per error)."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import attrs
import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rocktimer_client.api.admin import list_dead_letters, put_group_settings, redrive_dead_letter
from rocktimer_client.api.consumer import (
    ack_messages,
    get_group_message,
    get_group_settings,
    list_groups,
    list_topics,
    receive_messages,
)
from rocktimer_client.api.producer import (
    cancel_message,
    get_message,
    reschedule_message,
    send_message,
    send_messages,
)
from rocktimer_client.models import (
    AckRequest,
    ExponentialPolicy,
    FixedPolicy,
    GroupSettings,
    LevelsPolicy,
    ReceiveRequest,
    RescheduleMessage,
    SendBatch,
    SendMessage,
    SendMessagePropertiesType0,
)
from rocktimer_client.types import UNSET, Response, Unset

from app.defaults import MAX_BATCH, PAGE_MAX, RECEIVE_WAIT_MS_MAX, STREAM_MAX_IN_FLIGHT
from cli import batchfile
from cli.connection import DEFAULT_URL, Api, Exit, Failed, NoStream
from cli.show import Out, count, now_ms
from cli.times import duration, parse_duration_ms, parse_time_ms, when

EXIT_CODES = (
    "Exit codes: 0 ok · 1 not found, conflict, or some batch items failed or printed "
    "messages not acked · 2 bad usage, or input the server refused as invalid · 3 server "
    "unreachable · 4 API key missing or not allowed · 5 server overloaded or failing "
    "(retry later) · 130 interrupted (Ctrl+C)."
)
MAX_BATCH_BYTES = 4 * 1024 * 1024  # JSON per request, under the server's 5 MiB default
MIN_POLL_MS = 100  # a long poll's wait: a shorter one polls in a busy loop
MAX_REDRIVE_ALL = 1_000_000  # dead letters one `dlq redrive --all` sends back
_ITEM_PREFIX = re.compile(r"^messages\.\d+\.")

app = typer.Typer(
    name="rocktimer",
    help="Schedule, inspect and consume rocktimer messages over its HTTP API.",
    epilog=EXIT_CODES,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
dlq = typer.Typer(help="Dead letters of a group: list them, send them back.", no_args_is_help=True)
app.add_typer(dlq, name="dlq")


@dataclass
class Context:
    url: str
    api_key: str | None

    def api(self) -> Api:
        return Api(self.url, self.api_key)


@app.callback()
def options(
    ctx: typer.Context,
    url: Annotated[
        str, typer.Option(envvar="ROCKTIMER_URL", help="The server's base URL.")
    ] = DEFAULT_URL,
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar="ROCKTIMER_API_KEY", help="Sent as a bearer token.", show_default=False
        ),
    ] = None,
) -> None:
    ctx.obj = Context(url, api_key)


def _api(ctx: typer.Context) -> Api:
    context: Context = ctx.obj
    api = context.api()
    ctx.call_on_close(api.close)
    return api


def _ms(parse: Any, text: str | None, flag: str) -> int | None:
    if text is None:
        return None
    try:
        value: int = parse(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=flag) from None
    return value


def _path_name(value: str) -> str:
    """A topic, group or message id as one segment of a URL path. An empty one, ``.``,
    ``..`` or one with a ``/`` cannot be a segment: the request would reach another path
    and come back a bare 404, so it is refused here as the usage error it is."""
    if not value:
        raise typer.BadParameter("must not be empty")
    if value in (".", "..") or "/" in value:
        raise typer.BadParameter(f"{value!r} cannot be one part of a URL path ('.', '..', '/')")
    return value


def _path_names(values: list[str] | None) -> list[str] | None:
    return None if values is None else [_path_name(v) for v in values]


Json = Annotated[bool, typer.Option("--json", help="One JSON document per line, for scripts.")]
Topic = Annotated[str, typer.Argument(help="Topic name.", show_default=False, callback=_path_name)]
Group = Annotated[
    str, typer.Argument(help="Consumer group name.", show_default=False, callback=_path_name)
]
MsgId = Annotated[str, typer.Argument(help="Message id.", show_default=False, callback=_path_name)]
Delay = Annotated[
    str | None,
    typer.Option(help="Deliver after this long, with a unit: 500ms, 5s, 10m, 2h, 1d."),
]
At = Annotated[
    str | None,
    typer.Option(help="Deliver at this time: epoch ms or ISO 8601 (no zone: local time)."),
]
Level = Annotated[
    int | None, typer.Option(min=1, max=18, help="RocketMQ delay level 1..18 (1s … 2h).")
]


# --- producer ------------------------------------------------------------------------------


@app.command()
def send(
    ctx: typer.Context,
    topic: Topic,
    body: Annotated[str, typer.Argument(help="The message body; - reads standard input.")],
    msg_id: Annotated[
        str | None, typer.Option("--id", help="Message id (default: the server makes one).")
    ] = None,
    delay: Delay = None,
    at: At = None,
    level: Level = None,
    tag: Annotated[str | None, typer.Option(help="Tag (for group filters).")] = None,
    prop: Annotated[
        list[str] | None, typer.Option(help="A property KEY=VALUE (repeat for more).")
    ] = None,
    base64: Annotated[bool, typer.Option(help="BODY is base64 (binary bodies).")] = False,
    as_json: Json = False,
) -> None:
    """Schedule one message (now, after --delay, at --at, or at delay --level)."""
    properties: SendMessagePropertiesType0 | Unset = UNSET
    if prop:
        pairs = [p.partition("=") for p in prop]
        if any(not sep or not key for key, sep, _ in pairs):
            raise typer.BadParameter("write each property as KEY=VALUE", param_hint="--prop")
        properties = SendMessagePropertiesType0.from_dict({k: v for k, _, v in pairs})
    message = SendMessage(
        body=sys.stdin.read() if body == "-" else body,
        msg_id=msg_id if msg_id is not None else UNSET,
        body_encoding="base64" if base64 else "utf8",
        properties=properties,
        tag=tag if tag is not None else UNSET,
        **_deliver_time(delay, at, level),
    )
    status, sent = _api(ctx).reply(send_message.sync_detailed, topic, body=message)
    out = Out(as_json)
    if as_json:
        out.json({**sent.to_dict(), "created": status == 201})
        return
    verb = "scheduled" if status == 201 else "already scheduled (the first send is kept)"
    out.say(
        f"{verb}: {escape(topic)}/{escape(sent.msg_id)} for {when(sent.deliver_at_ms, now_ms())}"
    )


def _deliver_time(delay: str | None, at: str | None, level: int | None) -> dict[str, int]:
    """--delay / --at / --level as the API's delay_ms / deliver_at_ms / delay_level."""
    if sum(x is not None for x in (delay, at, level)) > 1:
        raise typer.BadParameter("give at most one", param_hint="--delay, --at, --level")
    given = {
        "delay_ms": _ms(parse_duration_ms, delay, "--delay"),
        "deliver_at_ms": _ms(parse_time_ms, at, "--at"),
        "delay_level": level,
    }
    return {name: value for name, value in given.items() if value is not None}


@app.command()
def batch(
    ctx: typer.Context,
    topic: Topic,
    file: Annotated[Path, typer.Argument(help="JSON Lines or CSV (by extension); - is stdin.")],
    file_format: Annotated[
        str | None,
        typer.Option("--format", help="jsonl or csv (default: from the file's extension)."),
    ] = None,
    as_json: Json = False,
) -> None:
    """Schedule every message of a file, 1000 per request; each item succeeds or fails alone.

    JSON Lines: one send body per line ({"body": ..., "msg_id": ..., "delay_ms": ...}).

    CSV: a header row naming body, msg_id, tag, delay_ms, deliver_at_ms, delay_level,
    body_encoding, properties.NAME."""
    kind = file_format or batchfile.kind_of(str(file))
    if kind not in ("jsonl", "csv"):
        raise typer.BadParameter("jsonl or csv", param_hint="--format")
    try:
        text = sys.stdin.read() if str(file) == "-" else file.read_text()
    except OSError as exc:
        raise typer.BadParameter(exc.strerror or str(exc), param_hint="FILE") from None
    items = list(batchfile.read(text.splitlines(), kind))
    out, api = Out(as_json), _api(ctx)
    counts = {"created": 0, "existing": 0, "failed": 0}

    def report(line: int, status: int, msg_id: str | None, error: str | None) -> None:
        key = "created" if status == 201 else "existing" if status == 200 else "failed"
        counts[key] += 1
        if as_json:
            doc = {"line": line, "status": status, "msg_id": msg_id, "error": error}
            out.json({k: v for k, v in doc.items() if v is not None})
        elif error is not None:
            out.warn(f"line {line}: {status} {escape(error)}")

    with Progress(
        TextColumn("sending"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=out.err,
        disable=as_json,
    ) as progress:
        task = progress.add_task("send", total=len(items))
        for chunk in _chunks(items):
            sendable = [i for i in chunk if i.message is not None]
            outcomes: dict[int, tuple[int, str | None, str | None]] = {
                i.line: (422, None, i.error) for i in chunk if i.message is None
            }
            if sendable:
                body = SendBatch(messages=[i.message for i in sendable if i.message])
                done = api.call(send_messages.sync_detailed, topic, body=body)
                for item, result in zip(sendable, done.results, strict=True):
                    error = result.error if isinstance(result.error, str) else None
                    # The server names the item by its place in this request: drop that.
                    error = error and _ITEM_PREFIX.sub("", error)
                    outcomes[item.line] = (result.status, result.msg_id or None, error)
            for line in sorted(outcomes):
                report(line, *outcomes[line])
            progress.advance(task, len(chunk))
    if not as_json:
        out.say(
            f"{len(items)} messages: {counts['created']} scheduled, "
            f"{counts['existing']} already there, {counts['failed']} failed"
        )
    if counts["failed"]:
        raise typer.Exit(Exit.REFUSED)


def _chunks(items: list[batchfile.Item]) -> list[list[batchfile.Item]]:
    """Requests of at most MAX_BATCH items and about MAX_BATCH_BYTES of JSON."""
    chunks: list[list[batchfile.Item]] = [[]]
    size = 0
    for item in items:
        weight = len(item.message.body) + 200 if item.message else 0
        if len(chunks[-1]) == MAX_BATCH or (chunks[-1] and size + weight > MAX_BATCH_BYTES):
            chunks.append([])
            size = 0
        chunks[-1].append(item)
        size += weight
    return [c for c in chunks if c]


@app.command()
def status(
    ctx: typer.Context,
    topic: Topic,
    msg_id: MsgId,
    group: Annotated[
        str | None, typer.Option(help="Show the message as this consumer group sees it.")
    ] = None,
    as_json: Json = False,
) -> None:
    """A message's state: scheduled, delivered or cancelled (or, with --group, the group's)."""
    api = _api(ctx)
    if group is None:
        doc = api.call(get_message.sync_detailed, topic, msg_id).to_dict()
    else:
        doc = api.call(get_group_message.sync_detailed, topic, group, msg_id).to_dict()
    _record(Out(as_json), doc)


def _record(out: Out, doc: dict[str, Any]) -> None:
    if out.as_json:
        out.json(doc)
    else:
        out.fields(doc)


@app.command()
def cancel(ctx: typer.Context, topic: Topic, msg_id: MsgId, as_json: Json = False) -> None:
    """Cancel a scheduled message: it is never delivered (exit 1 if already delivered)."""
    done = _api(ctx).call(cancel_message.sync_detailed, topic, msg_id)
    out = Out(as_json)
    if as_json:
        out.json(done.to_dict())
    else:
        out.say(f"cancelled: {escape(topic)}/{escape(msg_id)}")


@app.command()
def reschedule(
    ctx: typer.Context,
    topic: Topic,
    msg_id: MsgId,
    delay: Delay = None,
    at: At = None,
    level: Level = None,
    as_json: Json = False,
) -> None:
    """Move a scheduled message to another time (exit 1 if delivered or cancelled)."""
    when_given = _deliver_time(delay, at, level)
    if not when_given:
        raise typer.BadParameter("give one", param_hint="--delay, --at, --level")
    body = RescheduleMessage(**when_given)
    done = _api(ctx).call(reschedule_message.sync_detailed, topic, msg_id, body=body)
    out = Out(as_json)
    if as_json:
        out.json(done.to_dict())
    else:
        at_text = when(done.deliver_at_ms, now_ms())
        out.say(f"rescheduled: {escape(topic)}/{escape(msg_id)} for {at_text}")


# --- consumer ------------------------------------------------------------------------------


@app.command()
def tail(
    ctx: typer.Context,
    topic: Topic,
    group: Group,
    ack: Annotated[
        bool, typer.Option(help="Ack each message once printed (--no-ack: it comes back later).")
    ] = True,
    count: Annotated[int | None, typer.Option(min=1, help="Stop after this many messages.")] = None,
    wait: Annotated[
        str, typer.Option(help="Long poll per request when polling, with a unit (100ms to 30s).")
    ] = "10s",
    invisible: Annotated[
        str,
        typer.Option(help="How long a received message stays hidden from the group, with a unit."),
    ] = "30s",
    as_json: Json = False,
) -> None:
    """Print GROUP's messages the moment they are visible, and ack each once printed.

    Runs until Ctrl+C (exit 130) or --count messages. Streams them (server-sent events);
    with --count, or from a server without streams, it long-polls for no more than the
    messages still to print, so it never holds a message it does not print. A message
    whose ack the server refuses (its --invisible ran out first: the group receives it
    again) is named on stderr, and the exit code is 1."""
    wait_ms = _ms(parse_duration_ms, wait, "--wait") or 0
    if not MIN_POLL_MS <= wait_ms <= RECEIVE_WAIT_MS_MAX:
        raise typer.BadParameter("give 100ms to 30s", param_hint="--wait")
    invisible_ms = _ms(parse_duration_ms, invisible, "--invisible") or 0
    api, out, seen = _api(ctx), Out(as_json), 0
    received: deque[dict[str, Any]] = deque()  # handed to us, not printed yet
    printed: list[dict[str, Any]] = []  # printed, not acked yet
    refused = 0  # printed messages whose ack the server refused

    def left() -> int:  # what one poll may take: no message is held and not printed
        return min(count - seen, MAX_BATCH) if count else STREAM_MAX_IN_FLIGHT

    def settle() -> None:
        nonlocal refused
        if not (ack and printed):
            return
        request = AckRequest(receipts=[m["receipt"] for m in printed])
        done = api.call(ack_messages.sync_detailed, topic, group, body=request)
        for message, result in zip(printed, done.results, strict=True):
            if result.status != "acked":
                refused += 1
                out.warn(_not_acked(topic, message, result.status))
        printed.clear()

    batches = _received(api, topic, group, invisible_ms, wait_ms, count is None, left)
    interrupted = False
    try:
        for got in batches:
            received.extend(got)
            while received:
                if as_json:
                    out.json(received[0])
                else:
                    _print_message(out, received[0])
                printed.append(received.popleft())
                seen += 1
            settle()  # each batch as soon as it is printed: its invisibility keeps running
            if count is not None and seen >= count:
                break
    except KeyboardInterrupt:
        interrupted = True
    finally:
        batches.close()  # a stream ends here: the server stops sending to it
    settle()
    if received:
        out.warn(
            f"{len(received)} received and not printed, so not acked: the group receives "
            f"them again after --invisible {escape(invisible)}"
        )
    if interrupted:
        out.warn(f"stopped after {seen} messages")
        raise typer.Exit(Exit.INTERRUPTED)
    if refused:
        raise typer.Exit(Exit.REFUSED)


def _not_acked(topic: str, message: dict[str, Any], status: str) -> str:
    why = {
        "expired": "its --invisible ran out before the ack; the group receives it again",
        "unknown": "the server knows no such receipt (acked already, or the message is gone)",
    }.get(status, status)
    name = f"{topic}/{message['msg_id']}"
    return f"not acked: {escape(name)} (attempt {message['attempt']}): {why}"


def _received(
    api: Api,
    topic: str,
    group: str,
    invisible_ms: int,
    wait_ms: int,
    stream: bool,
    left: Callable[[], int],
) -> Generator[list[dict[str, Any]]]:
    """What GROUP receives, a batch at a time: from the group's stream (at most
    STREAM_MAX_IN_FLIGHT unacked) if ``stream`` and the server has one, else by long polls of
    ``left()`` messages. A stream cannot be told to stop at a count: once an ack frees a
    slot it may hand out one more, which a tail that stops would hold unprinted until it
    came back; a poll takes no more than it is asked for."""
    if stream:
        path = f"/v1/topics/{quote(topic, safe='')}/groups/{quote(group, safe='')}/stream"
        params = {"invisible_ms": invisible_ms, "max_in_flight": STREAM_MAX_IN_FLIGHT}
        try:
            for message in api.events(path, params):
                yield [message]
            return
        except NoStream:
            pass
    while True:
        request = ReceiveRequest(max_messages=left(), wait_ms=wait_ms, invisible_ms=invisible_ms)
        got = api.call(receive_messages.sync_detailed, topic, group, body=request).messages
        yield [m.to_dict() for m in got]


def _print_message(out: Out, m: dict[str, Any]) -> None:
    late = m["delivered_at_ms"] - m["deliver_at_ms"]
    extra = [f"attempt {m['attempt']}"] if m["attempt"] > 1 else []
    extra += [f"tag {m['tag']}"] if "tag" in m else []
    extra += [f"{k}={v}" for k, v in m["properties"].items()]
    extra += [f"from {m['source_topic']}"] if "source_topic" in m else []
    stamp = when(m["delivered_at_ms"], m["delivered_at_ms"]).split(" (")[0]
    late_text = f"+{duration(late)}" if late > 0 else "on time"
    out.say(
        f"[dim]{stamp}[/dim] [bold]{escape(m['msg_id'])}[/bold] [dim]{late_text}"
        f"{'  ' + escape(' '.join(extra)) if extra else ''}[/dim]  {escape(m['body'])}"
    )


@app.command()
def settings(
    ctx: typer.Context,
    topic: Topic,
    group: Group,
    max_attempts: Annotated[
        int | None, typer.Option(min=1, max=64, help="Attempts before the DLQ.")
    ] = None,
    retry: Annotated[
        str | None, typer.Option(help="Retry policy: levels, exponential or fixed.")
    ] = None,
    initial: Annotated[str | None, typer.Option(help="exponential: first wait.")] = None,
    multiplier: Annotated[float | None, typer.Option(help="exponential: growth.")] = None,
    max_wait: Annotated[str | None, typer.Option(help="exponential: longest wait.")] = None,
    interval: Annotated[str | None, typer.Option(help="fixed: the wait.")] = None,
    tag_filter: Annotated[
        str | None, typer.Option("--filter", help='Tags the group receives: "*" or "A || B".')
    ] = None,
    as_json: Json = False,
) -> None:
    """Show a group's settings on a topic; with options, change them (the rest is kept)."""
    api = _api(ctx)
    current = api.call(get_group_settings.sync_detailed, topic, group)
    options = (max_attempts, retry, initial, multiplier, max_wait, interval, tag_filter)
    if any(option is not None for option in options):
        changed = attrs.evolve(
            current,
            retry=_policy(retry, initial, multiplier, max_wait, interval, current),
            max_attempts=current.max_attempts if max_attempts is None else max_attempts,
            filter_=current.filter_ if tag_filter is None else tag_filter,
        )
        current = api.call(put_group_settings.sync_detailed, topic, group, body=changed)
    _record(Out(as_json), _flat_settings(current))


def _policy(
    retry: str | None,
    initial: str | None,
    multiplier: float | None,
    max_wait: str | None,
    interval: str | None,
    current: GroupSettings,
) -> ExponentialPolicy | FixedPolicy | LevelsPolicy | Unset:
    kind = retry or (None if isinstance(current.retry, Unset) else current.retry.policy)
    given = {
        "--initial": initial,
        "--multiplier": multiplier,
        "--max-wait": max_wait,
        "--interval": interval,
    }
    allowed = {"exponential": {"--initial", "--multiplier", "--max-wait"}, "fixed": {"--interval"}}
    stray = [
        flag
        for flag, v in given.items()
        if v is not None and flag not in allowed.get(kind or "", set())
    ]
    if stray:
        raise typer.BadParameter(
            f"does not apply to the {kind or 'levels'} retry policy", param_hint=stray[0]
        )
    if kind == "exponential":
        old = current.retry if isinstance(current.retry, ExponentialPolicy) else None
        return ExponentialPolicy(
            policy="exponential",
            initial_ms=_ms(parse_duration_ms, initial, "--initial")
            or (old.initial_ms if old else UNSET),
            multiplier=multiplier if multiplier is not None else (old.multiplier if old else UNSET),
            max_ms=_ms(parse_duration_ms, max_wait, "--max-wait") or (old.max_ms if old else UNSET),
        )
    if kind == "fixed":
        old_fixed = current.retry if isinstance(current.retry, FixedPolicy) else None
        ms = _ms(parse_duration_ms, interval, "--interval")
        return FixedPolicy(
            policy="fixed",
            interval_ms=ms if ms is not None else (old_fixed.interval_ms if old_fixed else UNSET),
        )
    if kind in (None, "levels"):
        return LevelsPolicy()
    raise typer.BadParameter("levels, exponential or fixed", param_hint="--retry")


def _flat_settings(settings: GroupSettings) -> dict[str, Any]:
    doc = settings.to_dict()
    retry = doc.pop("retry", {"policy": "levels"})
    push = doc.pop("push", None) or {}  # its secret is write-only: never shown
    flat = {**doc, **{f"retry.{k}" if k != "policy" else "retry": v for k, v in retry.items()}}
    return flat | {f"push.{k}": v for k, v in push.items() if k != "secret"}


@app.command()
def topics(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option(min=1, help="At most this many, by name.")] = 1000,
    as_json: Json = False,
) -> None:
    """Topics by name, with their scheduled, delivered and cancelled counts."""
    items = _pages(_api(ctx), list_topics.sync_detailed, limit=limit)
    _listing(Out(as_json), items, ["topic", "scheduled", "delivered", "cancelled"], "no topics yet")


@app.command()
def groups(
    ctx: typer.Context,
    topic: Topic,
    limit: Annotated[int, typer.Option(min=1, help="At most this many, by name.")] = 1000,
    as_json: Json = False,
) -> None:
    """A topic's consumer groups: backlog, in flight, retrying, dead letters, filter."""
    items = _pages(_api(ctx), list_groups.sync_detailed, topic, limit=limit)
    columns = ["group", "backlog", "inflight", "retrying", "dead", "filter"]
    _listing(Out(as_json), items, columns, "no groups yet")


def _listing(out: Out, items: list[dict[str, Any]], columns: list[str], empty: str) -> None:
    if out.as_json:
        for item in items:
            out.json(item)
    elif not items:
        out.say(empty)
    else:
        out.table(
            columns,
            [[count(i[c]) if isinstance(i[c], int) else i[c] for c in columns] for i in items],
        )


# --- dead letters --------------------------------------------------------------------------


@dlq.command("list")
def dlq_list(
    ctx: typer.Context,
    topic: Topic,
    group: Group,
    limit: Annotated[int, typer.Option(min=1, help="At most this many, oldest first.")] = 100,
    as_json: Json = False,
) -> None:
    """The group's dead letters from TOPIC, oldest first."""
    items = _pages(_api(ctx), list_dead_letters.sync_detailed, topic, group, limit=limit)
    out = Out(as_json)
    if as_json:
        for item in items:
            out.json(item)
        return
    if not items:
        out.say("no dead letters")
        return
    now = now_ms()
    out.table(
        ["msg_id", "attempts", "last failure", "dead since"],
        [
            [
                d["msg_id"],
                d["attempts"],
                when(d["last_failure_ms"], now),
                when(d["dead_at_ms"], now),
            ]
            for d in items
        ],
    )


def _pages(
    api: Api, operation: Callable[..., Response[Any]], *args: str, limit: int
) -> list[dict[str, Any]]:
    """Up to ``limit`` items of a paged listing, following its cursors."""
    items: list[dict[str, Any]] = []
    cursor: str | Unset = UNSET
    while len(items) < limit:
        page = api.call(operation, *args, cursor=cursor, limit=min(limit - len(items), PAGE_MAX))
        items += [item.to_dict() for item in page.items]
        if isinstance(page.next_cursor, Unset) or not page.items:
            break
        cursor = page.next_cursor
    return items


@dlq.command("redrive")
def dlq_redrive(
    ctx: typer.Context,
    topic: Topic,
    group: Group,
    msg_ids: Annotated[
        list[str] | None,
        typer.Argument(help="Dead letters to send back.", show_default=False, callback=_path_names),
    ] = None,
    redrive_all: Annotated[
        bool, typer.Option("--all", help="Every dead letter of the group from TOPIC.")
    ] = False,
    as_json: Json = False,
) -> None:
    """Put dead letters back into the group's flow, attempts reset."""
    if bool(msg_ids) == redrive_all:
        raise typer.BadParameter(
            "name dead letters to redrive, or give --all", param_hint="MSG_IDS"
        )
    api, out = _api(ctx), Out(as_json)
    targets = msg_ids or [
        d["msg_id"]
        for d in _pages(api, list_dead_letters.sync_detailed, topic, group, limit=MAX_REDRIVE_ALL)
    ]
    for msg_id in targets:
        done = api.call(redrive_dead_letter.sync_detailed, topic, group, msg_id)
        if as_json:
            out.json(done.to_dict())
        else:
            out.say(f"redriven: {escape(topic)}/{escape(msg_id)} for group {escape(group)}")
    if not targets and not as_json:
        out.say("no dead letters")


# --- the service ---------------------------------------------------------------------------


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Address (ROCKTIMER_HOST).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (ROCKTIMER_PORT).")] = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="The RocksDB directory (ROCKTIMER_DATA_DIR).")
    ] = None,
) -> None:
    """Run the service (as `make run`); every ROCKTIMER_* setting applies."""
    for name, value in (("HOST", host), ("PORT", port), ("DATA_DIR", data_dir)):
        if value is not None:
            os.environ[f"ROCKTIMER_{name}"] = str(value)
    from app.__main__ import main as run_service

    run_service()


# --- the Spark jobs (pipeline/, `pip install -e '.[pipeline]'`) ----------------------------

PIPELINE_JOBS = {
    "load": ("bulk_load", "Load a file or directory of rows through the batch API (Spark)."),
    "report": ("report", "Lateness and outcome report from the event log (Spark)."),
    "audit": ("audit", "Check the event log against itself and a bulk_load input (Spark)."),
}


def _pipeline_job(module: str) -> Callable[[typer.Context], None]:
    def job(ctx: typer.Context) -> None:
        # The job reads --url / --api-key from these, so `rocktimer --url X load` reaches X.
        context: Context = ctx.find_root().obj
        env = {**os.environ, "ROCKTIMER_URL": context.url}
        if context.api_key:
            env["ROCKTIMER_API_KEY"] = context.api_key
        argv = [sys.executable, "-m", f"pipeline.{module}", *ctx.args]
        raise typer.Exit(subprocess.run(argv, env=env, check=False).returncode)

    return job


for _name, (_module, _help) in PIPELINE_JOBS.items():
    app.command(
        _name,
        help=f"{_help} Arguments go to python -m pipeline.{_module} (see its --help).",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        add_help_option=False,
    )(_pipeline_job(_module))


def _one_line_paragraphs(text: str) -> str:
    """A help text with each paragraph on one line. The docstrings wrap at the source's
    width, and typer's rich help keeps those line breaks, so on a terminal of any other
    width a paragraph broke mid-sentence; rich wraps one-line paragraphs to the terminal."""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)


for _info in [*app.registered_commands, *dlq.registered_commands]:
    if _info.help is None and _info.callback is not None and _info.callback.__doc__:
        _info.help = _one_line_paragraphs(_info.callback.__doc__)


def main(argv: list[str] | None = None) -> int:
    """The console script: the command's exit code, every failure as one line on stderr."""
    command = typer.main.get_command(app)
    try:
        result = command.main(args=argv, prog_name="rocktimer", standalone_mode=False)
    except Failed as exc:
        if exc.problem is not None and "--json" in (argv if argv is not None else sys.argv):
            sys.stdout.write(json.dumps(exc.problem) + "\n")
        print(f"rocktimer: {exc}", file=sys.stderr)
        return exc.exit_code
    except typer.TyperException as exc:  # click's errors, usage errors among them (exit 2)
        ctx = getattr(exc, "ctx", None)
        where = ctx.command_path if ctx is not None else "rocktimer"
        hint = f" (see {where} --help)" if exc.exit_code == Exit.USAGE else ""
        print(f"{where}: {exc.format_message()}{hint}", file=sys.stderr)
        return exc.exit_code
    except typer.Abort:
        return Exit.INTERRUPTED
    return result if isinstance(result, int) else Exit.OK


def run() -> None:
    sys.exit(main())
