"""The whole API through the generated Python client (clients/python), against a real server.

Every call checks the status code and that the reply parsed into its named model (an error
into Problem): a declaration that does not match what the server sends fails here.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from rocktimer_client import Client
from rocktimer_client.api.admin import (
    list_dead_letters,
    put_group_settings,
    redrive_dead_letter,
)
from rocktimer_client.api.consumer import (
    ack_messages,
    change_invisibility,
    get_group_message,
    get_group_settings,
    list_groups,
    list_topics,
    nack_messages,
    receive_messages,
)
from rocktimer_client.api.producer import (
    cancel_message,
    get_message,
    list_messages,
    reschedule_message,
    send_message,
    send_messages,
)
from rocktimer_client.api.service import healthz, metrics, readyz
from rocktimer_client.models import (
    AckRequest,
    AckResult,
    BatchResult,
    CancelResult,
    DeadLetterPage,
    ExponentialPolicy,
    FixedPolicy,
    GroupMessageState,
    GroupPage,
    GroupSettings,
    Health,
    InvisibilityRequest,
    InvisibilityResult,
    MessagePage,
    MessageView,
    NackRequest,
    NackResult,
    Problem,
    ReceivedMessage,
    ReceiveRequest,
    ReceiveResult,
    RedriveResult,
    RescheduleMessage,
    SendBatch,
    SendMessage,
    SendMessagePropertiesType0,
    SendResult,
    TopicPage,
)
from rocktimer_client.types import UNSET, Response, Unset

from clients import generate
from tests.support.server import Server

T = TypeVar("T")
WAIT_MS = 5_000  # long poll per receive: returns as soon as a message is there


@pytest.fixture
def client(server: Server) -> Iterator[Client]:
    with Client(base_url=server.url, timeout=None, raise_on_unexpected_status=True) as c:
        yield c


def ok(reply: Response[Any], status: int, model: type[T]) -> T:
    """The reply has ``status`` and parsed into ``model``."""
    assert reply.status_code == status, reply.content
    assert isinstance(reply.parsed, model), reply.parsed
    return reply.parsed


def receive(client: Client, topic: str, group: str, **request: Any) -> list[ReceivedMessage]:
    body = ReceiveRequest(wait_ms=WAIT_MS, **request)
    reply = receive_messages.sync_detailed(topic, group, client=client, body=body)
    return ok(reply, 200, ReceiveResult).messages


def test_send_status_cancel(client: Client, topic: str) -> None:
    props = SendMessagePropertiesType0.from_dict({"order": "42"})
    later = SendMessage(body="charge card", msg_id="order-42", delay_ms=3_600_000, properties=props)
    sent = ok(send_message.sync_detailed(topic, client=client, body=later), 201, SendResult)
    assert (sent.msg_id, sent.state) == ("order-42", "scheduled")
    again = send_message.sync_detailed(topic, client=client, body=later)
    assert ok(again, 200, SendResult).created_at_ms == sent.created_at_ms

    view = ok(get_message.sync_detailed(topic, "order-42", client=client), 200, MessageView)
    assert view.properties.to_dict() == {"order": "42"}
    assert view.deliver_at_ms == sent.deliver_at_ms
    assert isinstance(view.delivered_at_ms, type(UNSET))

    two_hours = RescheduleMessage(delay_ms=7_200_000)
    moved = reschedule_message.sync_detailed(topic, "order-42", client=client, body=two_hours)
    assert ok(moved, 200, SendResult).deliver_at_ms > sent.deliver_at_ms
    both = RescheduleMessage(delay_ms=1, delay_level=1)
    refused_body = reschedule_message.sync_detailed(topic, "order-42", client=client, body=both)
    assert ok(refused_body, 422, Problem).status == 422

    cancelled = cancel_message.sync_detailed(topic, "order-42", client=client)
    assert ok(cancelled, 200, CancelResult).state == "cancelled"
    view = ok(get_message.sync_detailed(topic, "order-42", client=client), 200, MessageView)
    assert view.state == "cancelled"
    assert view.cancelled_at_ms == ok(cancelled, 200, CancelResult).cancelled_at_ms

    refused = ok(send_message.sync_detailed(topic, client=client, body=later), 409, Problem)
    assert refused.status == 409
    missing = ok(get_message.sync_detailed(topic, "nope", client=client), 404, Problem)
    assert "nope" in missing.detail


def test_errors_parse_as_problems(client: Client, topic: str) -> None:
    """A 422 names the field (application/problem+json parsed into Problem, not None)."""
    both = SendMessage(body="x", delay_ms=1, delay_level=1)
    problem = ok(send_message.sync_detailed(topic, client=client, body=both), 422, Problem)
    assert problem.errors
    assert problem.errors[0].field == "delay_level"
    bad_topic = ok(get_message.sync_detailed("a b", "m", client=client), 422, Problem)
    assert bad_topic.title == "Unprocessable Content"


def test_batch(client: Client, topic: str) -> None:
    items = [SendMessage(body=f"m{i}", msg_id=f"b-{i}", delay_ms=60_000) for i in range(3)]
    items.append(SendMessage(body="too late", delay_ms=10**15))
    reply = send_messages.sync_detailed(topic, client=client, body=SendBatch(messages=items))
    results = ok(reply, 200, BatchResult).results
    assert [(r.index, r.status) for r in results] == [(0, 201), (1, 201), (2, 201), (3, 422)]
    assert [r.msg_id for r in results[:3]] == ["b-0", "b-1", "b-2"]
    assert isinstance(results[3].error, str)


def test_receive_ack_nack_invisibility(client: Client, topic: str) -> None:
    group = "workers"
    for i in range(3):
        msg = SendMessage(body=f"job {i}", msg_id=f"j{i}")
        ok(send_message.sync_detailed(topic, client=client, body=msg), 201, SendResult)
    got: list[ReceivedMessage] = []
    while len(got) < 3:
        got += receive(client, topic, group, max_messages=3)
    first, second, third = sorted(got, key=lambda m: m.msg_id)
    assert (first.body, first.attempt, first.body_encoding) == ("job 0", 1, "utf8")

    acked = ack_messages.sync_detailed(
        topic, group, client=client, body=AckRequest(receipts=[first.receipt, "forged"])
    )
    assert [r.status for r in ok(acked, 200, AckResult).results] == [
        "acked",
        "unknown",
    ]
    state = get_group_message.sync_detailed(topic, group, "j0", client=client)
    assert ok(state, 200, GroupMessageState).state == "acked"

    nacked = nack_messages.sync_detailed(
        topic, group, client=client, body=NackRequest(receipts=[second.receipt], delay_ms=0)
    )
    assert ok(nacked, 200, NackResult).results[0].status == "nacked"
    again = receive(client, topic, group)
    assert [(m.msg_id, m.attempt) for m in again] == [("j1", 2)]

    held = InvisibilityRequest(receipt=third.receipt, invisible_ms=60_000)
    renewed = change_invisibility.sync_detailed(topic, group, client=client, body=held)
    new_receipt = ok(renewed, 200, InvisibilityResult).receipt
    assert new_receipt != third.receipt
    stale = change_invisibility.sync_detailed(topic, group, client=client, body=held)
    assert ok(stale, 409, Problem).status == 409
    state = get_group_message.sync_detailed(topic, group, "j2", client=client)
    assert ok(state, 200, GroupMessageState).state == "inflight"
    never = get_group_message.sync_detailed(topic, "other", "j2", client=client)
    assert ok(never, 404, Problem).status == 404


def test_group_settings_dead_letters_redrive(client: Client, topic: str) -> None:
    group = "billing"
    defaults = get_group_settings.sync_detailed(topic, group, client=client)
    assert ok(defaults, 200, GroupSettings).max_attempts == 16

    exponential = GroupSettings(
        max_attempts=5, retry=ExponentialPolicy(policy="exponential", initial_ms=500)
    )
    put = put_group_settings.sync_detailed(topic, group, client=client, body=exponential)
    assert ok(put, 200, GroupSettings).retry == ExponentialPolicy(
        policy="exponential", initial_ms=500, multiplier=2.0, max_ms=7_200_000
    )
    once = GroupSettings(max_attempts=1, retry=FixedPolicy(policy="fixed", interval_ms=1_000))
    ok(put_group_settings.sync_detailed(topic, group, client=client, body=once), 200, GroupSettings)
    got = get_group_settings.sync_detailed(topic, group, client=client)
    assert ok(got, 200, GroupSettings).to_dict() == {**once.to_dict(), "push": None}

    msg = SendMessage(body="fails", msg_id="d1")
    ok(send_message.sync_detailed(topic, client=client, body=msg), 201, SendResult)
    (held,) = receive(client, topic, group)
    body = NackRequest(receipts=[held.receipt])
    ok(nack_messages.sync_detailed(topic, group, client=client, body=body), 200, NackResult)

    page = ok(list_dead_letters.sync_detailed(topic, group, client=client), 200, DeadLetterPage)
    assert [(d.msg_id, d.attempts) for d in page.items] == [("d1", 1)]
    assert isinstance(page.next_cursor, type(UNSET))
    redriven = redrive_dead_letter.sync_detailed(topic, group, "d1", client=client)
    assert ok(redriven, 200, RedriveResult).state == "pending"
    (back,) = receive(client, topic, group)
    assert (back.msg_id, back.attempt) == ("d1", 1)
    gone = redrive_dead_letter.sync_detailed(topic, group, "d1", client=client)
    assert ok(gone, 404, Problem).status == 404


def test_service_endpoints(client: Client) -> None:
    assert ok(healthz.sync_detailed(client=client), 200, Health).status == "alive"
    assert ok(readyz.sync_detailed(client=client), 200, Health).status == "ready"
    assert "rocktimer_pending_timers" in ok(metrics.sync_detailed(client=client), 200, str)


def test_browsing(client: Client, topic: str) -> None:
    for msg_id, delay in (("late", 3_600_000), ("soon", 60_000), ("now", 0)):
        msg = SendMessage(body=msg_id, msg_id=msg_id, delay_ms=delay)
        ok(send_message.sync_detailed(topic, client=client, body=msg), 201, SendResult)
    (got,) = receive(client, topic, "g")
    assert got.msg_id == "now"

    page = ok(list_messages.sync_detailed(topic, client=client, limit=1), 200, MessagePage)
    assert [m.msg_id for m in page.items] == ["soon"]  # due order
    assert isinstance(page.next_cursor, str)
    rest = list_messages.sync_detailed(topic, client=client, cursor=page.next_cursor)
    assert [m.msg_id for m in ok(rest, 200, MessagePage).items] == ["late"]

    seen: dict[str, Any] = {}
    cursor: str | Unset = UNSET
    while True:
        topics = ok(list_topics.sync_detailed(client=client, cursor=cursor), 200, TopicPage)
        seen |= {t.topic: (t.scheduled, t.delivered, t.cancelled) for t in topics.items}
        if isinstance(topics.next_cursor, Unset):
            break
        cursor = topics.next_cursor
    assert seen[topic] == (2, 1, 0)
    (group,) = ok(list_groups.sync_detailed(topic, client=client), 200, GroupPage).items
    assert (group.group, group.backlog, group.inflight, group.filter_) == ("g", 0, 1, "*")
    assert isinstance(group.push, Unset)


CLIENT_README = Path(generate.PYTHON_CLIENT / "README.md")
EXAMPLE = "rocktimer client example"  # the README's example says so in its first line


def test_the_readme_example_runs_against_a_real_server(server: Server, topic: str) -> None:
    """clients/python/README.md was the generator's boilerplate (api.example.com,
    MyDataModel): its example now runs as printed, the server's URL and a fresh topic
    put in."""
    readme = CLIENT_README.read_text()
    assert "api.example.com" not in readme
    assert "MyDataModel" not in readme
    blocks = [b.split("```", 1)[0] for b in readme.split("```python\n")[1:]]
    (example,) = [b for b in blocks if EXAMPLE in b.split("\n", 1)[0]]
    script = example.replace("http://127.0.0.1:8080", server.url).replace('"orders"', repr(topic))
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "received order-42 charge card attempt 1" in done.stdout, done.stdout
    assert "acked ['acked']" in done.stdout, done.stdout


def test_the_readme_error_example_is_what_the_server_says(client: Client, topic: str) -> None:
    late = SendMessage(body="x", delay_ms=-1)
    problem = ok(send_message.sync_detailed(topic, client=client, body=late), 422, Problem)
    assert problem.errors
    assert problem.errors[0].field == "delay_ms"
