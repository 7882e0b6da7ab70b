"""Hand-written hostile requests over real HTTP, each one refused the way api.md says.

Complements tests/e2e/test_bad_input.py (which covers the single send's bad fields, NaN /
Infinity / u64 / negative times on send, invalid UTF-8 in the send body, 0 and 1001 item
batches, %00 / %2F in the send's topic, a 6 MB body, a PUT on the collection) with what it
does not: a 100 MB body and the server's memory while refusing it, deep nesting, invalid
UTF-8 and lone surrogates everywhere else, 10k properties, out-of-range numbers on every
other field, per-item refusals in a batch, %2F / %00 / %FF in the group and msg_id
positions, wrong content types, a GET with a body, methods a resource does not allow.

Every test runs through the ``hostile`` client: after each test, no response was a 5xx,
the server process is alive and ready (/readyz 200), and its log holds no traceback.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fuzz.conftest import assert_healthy, assert_problem
from tests.support.process import status_kib
from tests.support.server import Server

JSON = {"content-type": "application/json"}
MiB = 1024 * 1024
U64_PLUS_1 = 2**64
I64_PLUS_1 = 2**63  # the schema's maximum for times is 2**63 - 1
RSS_LIMIT_MIB = 300  # the server process, while and after refusing a 100 MB body
RSS_GROWTH_LIMIT_MIB = 64  # buffering the body would add at least 100 MiB
DEFAULT_GROUP_SETTINGS = {
    "max_attempts": 16,
    "retry": {"policy": "levels"},
    "filter": "*",
    "push": None,
}


class Recorder:
    """Every response the test's client got, to assert none was a 5xx."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, int]] = []

    def __call__(self, response: httpx.Response) -> None:
        self.seen.append((response.request.method, str(response.request.url), response.status_code))

    def server_errors(self) -> list[tuple[str, str, int]]:
        return [s for s in self.seen if s[2] >= 500]


def log_size(server: Server) -> int:
    return server.log_path.stat().st_size if server.log_path.exists() else 0


def new_log(server: Server, since: int) -> str:
    path: Path = server.log_path
    if not path.exists():
        return ""
    with path.open("rb") as f:
        f.seek(since)
        return f.read().decode(errors="replace")


@pytest.fixture
def hostile(fuzz_server: Server) -> Iterator[httpx.Client]:
    """A client on the fuzz server; afterwards: no 5xx, healthy, no traceback logged."""
    recorder = Recorder()
    since = log_size(fuzz_server)
    with httpx.Client(
        base_url=fuzz_server.url, timeout=60, event_hooks={"response": [recorder]}
    ) as client:
        yield client
    assert not recorder.server_errors(), f"5xx answers: {recorder.server_errors()}"
    assert_healthy(fuzz_server)
    logged = new_log(fuzz_server, since)
    assert "Traceback" not in logged, logged[-4000:]


def post_raw(client: httpx.Client, path: str, raw: bytes) -> httpx.Response:
    return client.post(path, content=raw, headers=JSON)


def assert_nothing_stored(client: httpx.Client, topic: str) -> None:
    r = client.post(f"/v1/topics/{topic}/groups/probe/receive", json={"wait_ms": 0})
    assert r.status_code == 200, r.text
    assert r.json()["messages"] == []


def assert_names_field(doc: dict[str, Any], field: str) -> None:
    assert field in doc["detail"], doc
    assert any(field in e["field"] for e in doc.get("errors", [])), doc


# --- a 100 MB body -------------------------------------------------------------------


def rss_mib(pid: int) -> int:
    return status_kib(pid, "VmRSS") // 1024


class PeakRss:
    """Samples a process's resident memory every few ms until stopped."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss_mib(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, rss_mib(self.pid))
            except OSError:  # the process is gone: the test's health check says so
                return
            time.sleep(0.005)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mib(self.pid))


def hundred_mib() -> Iterator[bytes]:
    chunk = b" " * MiB
    for _ in range(100):
        yield chunk


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
@pytest.mark.parametrize(
    "path", ["/v1/topics/{topic}/messages", "/v1/topics/{topic}/messages/batch"]
)
def test_100_mb_body_is_refused_without_buffering_it(
    hostile: httpx.Client, fuzz_server: Server, topic: str, path: str, declared: bool
) -> None:
    assert fuzz_server.proc is not None
    pid = fuzz_server.proc.pid
    before = rss_mib(pid)
    headers = dict(JSON)
    if declared:
        headers["content-length"] = str(100 * MiB)
    with PeakRss(pid) as rss:
        r = hostile.post(path.format(topic=topic), content=hundred_mib(), headers=headers)
    assert_problem(r, 413)
    assert rss.peak < RSS_LIMIT_MIB, f"server RSS peaked at {rss.peak} MiB"
    assert rss.peak - before < RSS_GROWTH_LIMIT_MIB, f"RSS {before} → {rss.peak} MiB"
    assert rss_mib(pid) < RSS_LIMIT_MIB
    assert_nothing_stored(hostile, topic)


# --- deeply nested JSON ----------------------------------------------------------------

DEPTH = 100_000
ARRAYS = b"[" * DEPTH + b"]" * DEPTH
OBJECTS = b'{"a":' * DEPTH + b"1" + b"}" * DEPTH

NESTED: list[tuple[str, str, bytes]] = [
    ("send properties", "/v1/topics/{topic}/messages", b'{"body": "x", "properties": %s}'),
    ("send body", "/v1/topics/{topic}/messages", b'{"body": %s}'),
    ("batch item field", "/v1/topics/{topic}/messages/batch", b'{"messages": [{"body": %s}]}'),
    ("batch item", "/v1/topics/{topic}/messages/batch", b'{"messages": [%s]}'),
    ("batch messages", "/v1/topics/{topic}/messages/batch", b'{"messages": %s}'),
    ("receive", "/v1/topics/{topic}/groups/g/receive", b'{"wait_ms": %s}'),
    ("ack", "/v1/topics/{topic}/groups/g/ack", b'{"receipts": %s}'),
    ("nack", "/v1/topics/{topic}/groups/g/nack", b'{"receipts": ["r"], "delay_ms": %s}'),
    ("invisibility", "/v1/topics/{topic}/groups/g/invisibility", b'{"receipt": %s}'),
]


@pytest.mark.parametrize("nesting", [ARRAYS, OBJECTS], ids=["arrays", "objects"])
@pytest.mark.parametrize(("case", "path", "template"), NESTED, ids=[n[0] for n in NESTED])
def test_deeply_nested_json_is_a_4xx(
    hostile: httpx.Client, topic: str, case: str, path: str, template: bytes, nesting: bytes
) -> None:
    r = post_raw(hostile, path.format(topic=topic), template % nesting)
    assert_problem(r, (400, 422))
    assert_nothing_stored(hostile, topic)


def test_deeply_nested_group_settings_and_unbalanced_nesting(
    hostile: httpx.Client, topic: str
) -> None:
    r = hostile.put(f"/v1/topics/{topic}/groups/g", content=b'{"retry": %s}' % ARRAYS, headers=JSON)
    assert_problem(r, (400, 422))
    assert_problem(post_raw(hostile, f"/v1/topics/{topic}/messages", b"[" * (10 * DEPTH)), 400)
    assert_problem(post_raw(hostile, f"/v1/topics/{topic}/messages", b'{"a":' * DEPTH), 400)
    got = hostile.get(f"/v1/topics/{topic}/groups/g")
    assert got.json() == DEFAULT_GROUP_SETTINGS, got.text


# --- invalid UTF-8 and lone surrogates -----------------------------------------------

BAD_TEXT: list[tuple[str, bytes]] = [
    ("invalid byte", b"\xff"),
    ("overlong slash", b"\xc0\xaf"),
    ("utf-8 encoded surrogate", b"\xed\xa0\x80"),
    ("truncated sequence", b"\xe2\x82"),
    ("escaped lone high surrogate", b"\\ud800"),
    ("escaped lone low surrogate", b"\\udc00"),
]

TEXT_FIELDS: list[tuple[str, str, bytes]] = [
    ("batch item body", "/v1/topics/{topic}/messages/batch", b'{"messages": [{"body": "%s"}]}'),
    ("property key", "/v1/topics/{topic}/messages", b'{"body": "x", "properties": {"%s": "v"}}'),
    ("property value", "/v1/topics/{topic}/messages", b'{"body": "x", "properties": {"k": "%s"}}'),
    ("tag", "/v1/topics/{topic}/messages", b'{"body": "x", "tag": "%s"}'),
    ("msg_id", "/v1/topics/{topic}/messages", b'{"body": "x", "msg_id": "%s"}'),
    ("base64 body", "/v1/topics/{topic}/messages", b'{"body": "%s", "body_encoding": "base64"}'),
    ("ack receipt", "/v1/topics/{topic}/groups/g/ack", b'{"receipts": ["%s"]}'),
    ("nack receipt", "/v1/topics/{topic}/groups/g/nack", b'{"receipts": ["%s"]}'),
    (
        "invisibility receipt",
        "/v1/topics/{topic}/groups/g/invisibility",
        b'{"receipt": "%s", "invisible_ms": 1000}',
    ),
    ("member name", "/v1/topics/{topic}/groups/g/receive", b'{"%s": 1}'),
]


@pytest.mark.parametrize(("kind", "text"), BAD_TEXT, ids=[b[0] for b in BAD_TEXT])
@pytest.mark.parametrize(("case", "path", "template"), TEXT_FIELDS, ids=[t[0] for t in TEXT_FIELDS])
def test_text_that_is_not_unicode_is_refused(
    hostile: httpx.Client, topic: str, case: str, path: str, template: bytes, kind: str, text: bytes
) -> None:
    r = post_raw(hostile, path.format(topic=topic), template % text)
    if r.status_code == 200 and case == "batch item body":
        # Only possible if the envelope parses: then the item itself must be refused.
        assert r.json()["results"][0]["status"] == 422, r.text
    else:
        assert_problem(r, (400, 422))
    assert_nothing_stored(hostile, topic)


def test_not_unicode_in_group_settings(hostile: httpx.Client, topic: str) -> None:
    for text in (b"\xff", b"\\ud800"):
        raw = b'{"retry": {"policy": "%s"}}' % text
        r = hostile.put(f"/v1/topics/{topic}/groups/g", content=raw, headers=JSON)
        assert_problem(r, (400, 422))


def test_byte_order_mark_and_trailing_garbage(hostile: httpx.Client, topic: str) -> None:
    path = f"/v1/topics/{topic}/messages"
    assert_problem(post_raw(hostile, path, b'\xef\xbb\xbf{"body": "x"}'), 400)
    assert_problem(post_raw(hostile, path, b'{"body": "x"} {"body": "y"}'), 400)
    assert_problem(post_raw(hostile, path, b'{"body": "x"}\x00'), 400)
    assert_nothing_stored(hostile, topic)


# --- 10k properties ---------------------------------------------------------------------

TEN_K = {f"k{i}": "v" for i in range(10_000)}


def test_10k_message_properties_are_a_422_naming_properties(
    hostile: httpx.Client, topic: str
) -> None:
    r = hostile.post(f"/v1/topics/{topic}/messages", json={"body": "x", "properties": TEN_K})
    assert_names_field(assert_problem(r, 422), "properties")
    assert_nothing_stored(hostile, topic)


def test_10k_message_properties_in_a_batch_item(hostile: httpx.Client, topic: str) -> None:
    items = [{"body": "x", "properties": TEN_K}, {"body": "ok", "msg_id": "fine"}]
    r = hostile.post(f"/v1/topics/{topic}/messages/batch", json={"messages": items})
    assert r.status_code == 200, r.text
    bad, good = r.json()["results"]
    assert bad["status"] == 422, bad
    assert "properties" in bad["error"], bad
    assert good["status"] == 201, good


def test_10k_unknown_members_are_a_422_naming_them(hostile: httpx.Client, topic: str) -> None:
    r = hostile.post(f"/v1/topics/{topic}/messages", json={"body": "x", **TEN_K})
    # The first 20 are named and the rest counted: the reply stays small (a 1.2 MB 422
    # listing all 10k was the finding).
    assert_names_field(assert_problem(r, 422), "k0")
    assert "and 9980 more errors" in r.text
    assert len(r.content) < 10_000
    r = hostile.post(f"/v1/topics/{topic}/groups/g/receive", json=TEN_K)
    assert_names_field(assert_problem(r, 422), "k0")
    assert_nothing_stored(hostile, topic)


# --- times and numbers out of range, NaN and Infinity ---------------------------------

SEND = "/v1/topics/{topic}/messages"
RECEIVE = "/v1/topics/{topic}/groups/g/receive"
OUT_OF_RANGE: list[tuple[str, str, str, str]] = [
    # (case, path, body with %s for the value, the field the problem must name)
    ("send delay_ms", SEND, '{"body": "x", "delay_ms": %s}', "delay_ms"),
    ("send delay_level", SEND, '{"body": "x", "delay_level": %s}', "delay_level"),
    ("receive wait_ms", RECEIVE, '{"wait_ms": %s}', "wait_ms"),
    ("receive max_messages", RECEIVE, '{"max_messages": %s}', "max_messages"),
    ("receive invisible_ms", RECEIVE, '{"invisible_ms": %s}', "invisible_ms"),
    (
        "nack delay_ms",
        "/v1/topics/{topic}/groups/g/nack",
        '{"receipts": ["r"], "delay_ms": %s}',
        "delay_ms",
    ),
    (
        "invisibility invisible_ms",
        "/v1/topics/{topic}/groups/g/invisibility",
        '{"receipt": "r", "invisible_ms": %s}',
        "invisible_ms",
    ),
]
BAD_NUMBERS: list[tuple[str, str]] = [
    ("beyond u64", str(U64_PLUS_1)),
    ("beyond i64", str(I64_PLUS_1)),
    ("minus beyond u64", str(-U64_PLUS_1)),
    ("negative", "-1"),
    ("NaN", "NaN"),
    ("Infinity", "Infinity"),
    ("-Infinity", "-Infinity"),
    ("exponent", "1e3"),
    ("overflowing exponent", "1E400"),
    ("float", "1.5"),
]


@pytest.mark.parametrize(("kind", "value"), BAD_NUMBERS, ids=[b[0] for b in BAD_NUMBERS])
@pytest.mark.parametrize(
    ("case", "path", "template", "field"), OUT_OF_RANGE, ids=[o[0] for o in OUT_OF_RANGE]
)
def test_numbers_out_of_range_are_a_422_naming_the_field(
    hostile: httpx.Client,
    topic: str,
    case: str,
    path: str,
    template: str,
    field: str,
    kind: str,
    value: str,
) -> None:
    r = post_raw(hostile, path.format(topic=topic), (template % value).encode())
    assert_names_field(assert_problem(r, 422), field)
    assert_nothing_stored(hostile, topic)


@pytest.mark.parametrize("field", ["deliver_at_ms", "delay_ms"])
def test_largest_schema_time_is_past_the_maximum_delay(
    hostile: httpx.Client, topic: str, field: str
) -> None:
    """2**63 - 1 passes the schema; the maximum delay (10 years) must still refuse it."""
    r = hostile.post(f"/v1/topics/{topic}/messages", json={"body": "x", field: I64_PLUS_1 - 1})
    assert_names_field(assert_problem(r, 422), field)
    assert_nothing_stored(hostile, topic)


def test_a_5000_digit_time_is_refused(hostile: httpx.Client, topic: str) -> None:
    raw = b'{"body": "x", "deliver_at_ms": ' + b"1" * 5000 + b"}"
    assert_problem(post_raw(hostile, f"/v1/topics/{topic}/messages", raw), (400, 422))


def test_bad_times_in_batch_items_are_refused_one_by_one(hostile: httpx.Client, topic: str) -> None:
    values = [str(U64_PLUS_1), str(I64_PLUS_1), "-1", "NaN", "Infinity", "-Infinity", "1.5"]
    items = [f'{{"body": "x", "deliver_at_ms": {v}}}' for v in values]
    items += [f'{{"body": "x", "delay_ms": {v}}}' for v in values]
    items.append('{"body": "kept", "msg_id": "kept"}')
    raw = ('{"messages": [' + ", ".join(items) + "]}").encode()
    r = post_raw(hostile, f"/v1/topics/{topic}/messages/batch", raw)
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["index"] for x in results] == list(range(len(items)))
    for result in results[:-1]:
        assert result["status"] == 422, result
        assert "deliver_at_ms" in result["error"] or "delay_ms" in result["error"], result
    assert results[-1]["status"] == 201, results[-1]


GROUP_SETTINGS: list[tuple[str, str]] = [
    ('{"max_attempts": %s}', "max_attempts"),
    ('{"retry": {"policy": "exponential", "multiplier": %s}}', "multiplier"),
    ('{"retry": {"policy": "exponential", "initial_ms": %s}}', "initial_ms"),
    ('{"retry": {"policy": "exponential", "max_ms": %s}}', "max_ms"),
    ('{"retry": {"policy": "fixed", "interval_ms": %s}}', "interval_ms"),
]


@pytest.mark.parametrize(("kind", "value"), BAD_NUMBERS, ids=[b[0] for b in BAD_NUMBERS])
@pytest.mark.parametrize(("template", "field"), GROUP_SETTINGS, ids=[g[1] for g in GROUP_SETTINGS])
def test_bad_numbers_in_group_settings(
    hostile: httpx.Client, topic: str, template: str, field: str, kind: str, value: str
) -> None:
    if field == "multiplier" and kind == "float":
        value = "100.5"  # the multiplier is a float: 1.5 is fine, over 100 is not
    raw = (template % value).encode()
    r = hostile.put(f"/v1/topics/{topic}/groups/g", content=raw, headers=JSON)
    assert_names_field(assert_problem(r, 422), field)
    got = hostile.get(f"/v1/topics/{topic}/groups/g")
    assert got.json() == DEFAULT_GROUP_SETTINGS, got.text


@pytest.mark.parametrize(
    "query",
    [
        f"limit={U64_PLUS_1}",
        "limit=-1",
        "limit=NaN",
        "limit=Infinity",
        "limit=1e3",
        "limit=",
        "cursor=%00",
        "cursor=%FF%FE",
        "cursor=" + "A" * 65,
        "cursor=////",
    ],
)
def test_bad_dead_letter_query(hostile: httpx.Client, topic: str, query: str) -> None:
    r = hostile.get(f"/v1/topics/{topic}/groups/g/dlq?{query}")
    assert_names_field(assert_problem(r, 422), query.split("=", maxsplit=1)[0])


# --- batches at and past their limits (0 and 1001 items: tests/e2e) ------------------


def test_batch_of_1000_is_accepted_and_answered_in_order(hostile: httpx.Client, topic: str) -> None:
    items = [{"body": str(i), "msg_id": f"m{i}"} for i in range(1000)]
    r = hostile.post(f"/v1/topics/{topic}/messages/batch", json={"messages": items})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [(x["index"], x["status"], x["msg_id"]) for x in results] == [
        (i, 201, f"m{i}") for i in range(1000)
    ]


def test_batch_of_1000_invalid_items_stores_nothing(hostile: httpx.Client, topic: str) -> None:
    items: list[Any] = [None, 5, "x", [], {}, {"body": 1}, {"body": "x", "delay_ms": -1}]
    items = (items * 143)[:1000]
    r = hostile.post(f"/v1/topics/{topic}/messages/batch", json={"messages": items})
    assert r.status_code == 200, r.text
    assert {x["status"] for x in r.json()["results"]} == {422}
    assert_nothing_stored(hostile, topic)


def test_batch_over_the_request_limit_is_413(hostile: httpx.Client, topic: str) -> None:
    items = [{"body": "x" * 6000} for _ in range(1000)]  # 6 MB, every item alone is fine
    r = hostile.post(f"/v1/topics/{topic}/messages/batch", json={"messages": items})
    assert_problem(r, 413)
    assert_nothing_stored(hostile, topic)


@pytest.mark.parametrize("count", [0, 1001])
def test_nack_receipt_count_limits(hostile: httpx.Client, topic: str, count: int) -> None:
    r = hostile.post(f"/v1/topics/{topic}/groups/g/nack", json={"receipts": ["r"] * count})
    assert_names_field(assert_problem(r, 422), "receipts")


@pytest.mark.parametrize("body", [{"messages": None}, {"messages": [{"body": "x"}], "extra": 1}])
def test_batch_envelope_refused_whole(
    hostile: httpx.Client, topic: str, body: dict[str, Any]
) -> None:
    assert_problem(hostile.post(f"/v1/topics/{topic}/messages/batch", json=body), 422)
    assert_nothing_stored(hostile, topic)


# --- %2F, %00 and %FF in path segments (the send's topic: tests/e2e) ----------------

ENCODED_PATHS: list[tuple[str, str]] = [
    # topic position, on other operations than the send
    ("GET", "/v1/topics/a%2Fb/messages/m"),
    ("DELETE", "/v1/topics/a%00b/messages/m"),
    ("POST", "/v1/topics/a%2Fb/groups/g/receive"),
    ("POST", "/v1/topics/a%00b/groups/g/receive"),
    ("POST", "/v1/topics/%FF/messages/batch"),
    ("POST", "/v1/topics/t%0A/messages"),  # "$" must not match before a final newline
    # group position
    ("POST", "/v1/topics/{topic}/groups/a%2Fb/receive"),
    ("POST", "/v1/topics/{topic}/groups/a%00b/receive"),
    ("POST", "/v1/topics/{topic}/groups/%FF/ack"),
    ("PUT", "/v1/topics/{topic}/groups/a%2Fb"),
    ("PUT", "/v1/topics/{topic}/groups/a%00b"),
    ("PUT", "/v1/topics/{topic}/groups/g%2F"),
    ("GET", "/v1/topics/{topic}/groups/%2e%2e"),
    ("POST", "/v1/topics/{topic}/groups/g%0A/receive"),
    # msg_id position
    ("GET", "/v1/topics/{topic}/messages/a%2Fb"),
    ("GET", "/v1/topics/{topic}/messages/a%00b"),
    ("DELETE", "/v1/topics/{topic}/messages/a%2Fb"),
    ("DELETE", "/v1/topics/{topic}/messages/a%00b"),
    ("GET", "/v1/topics/{topic}/messages/m%2F"),
    ("GET", "/v1/topics/{topic}/messages/m%0A"),
    ("POST", "/v1/topics/{topic}/messages/%2F"),
    ("GET", "/v1/topics/{topic}/groups/g/messages/a%2Fb"),
    ("GET", "/v1/topics/{topic}/groups/g/messages/a%00b"),
    ("GET", "/v1/topics/{topic}/groups/g/messages/m%2F"),
    ("POST", "/v1/topics/{topic}/groups/g/dlq/a%2Fb/redrive"),
    ("POST", "/v1/topics/{topic}/groups/g/dlq/a%00b/redrive"),
    ("POST", "/v1/topics/{topic}/groups/g/dlq/%FF/redrive"),
]


@pytest.mark.parametrize(
    ("method", "path"), ENCODED_PATHS, ids=[f"{m} {p}" for m, p in ENCODED_PATHS]
)
def test_encoded_slash_nul_and_non_utf8_in_path_segments(
    hostile: httpx.Client, topic: str, method: str, path: str
) -> None:
    """A name that breaks the name rules is a 404 or 422 problem, never a redirect to
    another resource (a client following a 307 would re-send its body there)."""
    url = path.format(topic=topic)
    body = {"body": "x", "receipts": ["r"], "messages": [{"body": "x"}]}
    content = json.dumps(body).encode() if method in ("POST", "PUT") else None
    # Sent as written: httpx would otherwise normalise the escapes.
    request = hostile.build_request(method, url, content=content, headers=JSON)
    request.url = request.url.copy_with(raw_path=url.encode())
    r = hostile.send(request)
    assert_problem(r, (404, 405, 422))
    assert_nothing_stored(hostile, topic)


# --- content types ------------------------------------------------------------------

BODY_ROUTES: list[tuple[str, str, dict[str, Any]]] = [
    ("POST", "/v1/topics/{topic}/messages", {"body": "x"}),
    ("POST", "/v1/topics/{topic}/messages/batch", {"messages": [{"body": "x"}]}),
    ("POST", "/v1/topics/{topic}/groups/g/receive", {}),
    ("POST", "/v1/topics/{topic}/groups/g/ack", {"receipts": ["r"]}),
    ("POST", "/v1/topics/{topic}/groups/g/nack", {"receipts": ["r"]}),
    ("POST", "/v1/topics/{topic}/groups/g/invisibility", {"receipt": "r", "invisible_ms": 1000}),
    ("PUT", "/v1/topics/{topic}/groups/g", {"max_attempts": 3}),
]
WRONG_TYPES = [
    "application/x-www-form-urlencoded",  # what curl -d sends
    "multipart/form-data; boundary=x",
    "application/xml",
    "application/octet-stream",
]


def assert_unsupported_media_type(
    client: httpx.Client, topic: str, method: str, path: str, body: dict[str, Any], ctype: str
) -> None:
    """api.md: JSON in and out. A body declared as another media type is refused with 415
    Unsupported Media Type (RFC 9110 §15.5.16), even when its bytes happen to be JSON: the
    client said it is something else, and nothing is done with it."""
    url = path.format(topic=topic)
    r = client.request(
        method, url, content=json.dumps(body).encode(), headers={"content-type": ctype}
    )
    assert_problem(r, 415)
    assert_nothing_stored(client, topic)
    if method == "PUT":
        assert client.get(url).json() == DEFAULT_GROUP_SETTINGS


@pytest.mark.parametrize(
    ("method", "path", "body"), BODY_ROUTES, ids=[f"{m} {p}" for m, p, _ in BODY_ROUTES]
)
def test_a_text_plain_body_is_415(
    hostile: httpx.Client, topic: str, method: str, path: str, body: dict[str, Any]
) -> None:
    assert_unsupported_media_type(hostile, topic, method, path, body, "text/plain")


@pytest.mark.parametrize("content_type", WRONG_TYPES)
def test_a_send_declared_as_another_media_type_is_415(
    hostile: httpx.Client, topic: str, content_type: str
) -> None:
    method, path, body = BODY_ROUTES[0]
    assert_unsupported_media_type(hostile, topic, method, path, body, content_type)


@pytest.mark.parametrize(
    "content_type",
    ["application/json; charset=utf-8", "Application/JSON", "application/json;charset=UTF-8"],
)
def test_json_media_type_variants_are_accepted(
    hostile: httpx.Client, topic: str, content_type: str
) -> None:
    r = hostile.post(
        f"/v1/topics/{topic}/messages",
        content=b'{"body": "x", "msg_id": "ok"}',
        headers={"content-type": content_type},
    )
    assert r.status_code == 201, r.text


# --- a GET with a body ------------------------------------------------------------------


def test_get_with_a_body_ignores_it_and_keeps_the_connection_in_sync(
    hostile: httpx.Client, topic: str
) -> None:
    sent = hostile.post(f"/v1/topics/{topic}/messages", json={"body": "x", "msg_id": "m1"})
    assert sent.status_code == 201, sent.text
    # The body looks like a second request: were it not read off the connection, the
    # next request on this keep-alive connection would be answered with it.
    smuggled = b"GET /v1/topics/other/messages/zz HTTP/1.1\r\nHost: x\r\n\r\n"
    for _ in range(3):
        r = hostile.request(
            "GET", f"/v1/topics/{topic}/messages/m1", content=smuggled, headers=JSON
        )
        assert r.status_code == 200, r.text
        assert r.json()["msg_id"] == "m1"
        assert hostile.get("/healthz").json() == {"status": "alive"}
    r = hostile.request("GET", f"/v1/topics/{topic}/groups/g/dlq", content=b'{"limit": 0}')
    assert r.status_code == 200, r.text
    r = hostile.request("GET", "/readyz", content=b"\xff" * 1000)
    assert r.status_code == 200, r.text
    r = hostile.request("GET", f"/v1/topics/{topic}/messages/m1", content=b" " * (6 * MiB))
    assert r.status_code in (200, 413), r.text
    if r.status_code == 413:
        assert_problem(r, 413)


# --- methods ----------------------------------------------------------------------------

NOT_ALLOWED: list[tuple[str, str, set[str]]] = [
    ("PUT", "/v1/topics/{topic}/messages/m", {"GET", "DELETE", "PATCH"}),
    ("POST", "/v1/topics/{topic}/messages/m", {"GET", "DELETE", "PATCH"}),
    ("PATCH", "/v1/topics/{topic}/groups/g", {"GET", "PUT"}),
    ("DELETE", "/v1/topics/{topic}/groups/g", {"GET", "PUT"}),
    ("GET", "/v1/topics/{topic}/messages/batch/x", set()),
    ("PUT", "/v1/topics/{topic}/messages/batch", {"POST"}),
    ("GET", "/v1/topics/{topic}/groups/g/receive", {"POST"}),
    ("DELETE", "/v1/topics/{topic}/groups/g/ack", {"POST"}),
    ("GET", "/v1/topics/{topic}/groups/g/dlq/m/redrive", {"POST"}),
    ("POST", "/v1/topics/{topic}/groups/g/dlq", {"GET"}),
    ("POST", "/healthz", {"GET"}),
    ("DELETE", "/metrics", {"GET"}),
    ("PUT", "/openapi.json", {"GET"}),
    ("TRACE", "/readyz", {"GET"}),
    ("OPTIONS", "/v1/topics/{topic}/messages", {"POST"}),
    ("PROPFIND", "/v1/topics/{topic}/messages/m", {"GET", "DELETE"}),
]


@pytest.mark.parametrize(
    ("method", "path", "allowed"), NOT_ALLOWED, ids=[f"{m} {p}" for m, p, _ in NOT_ALLOWED]
)
def test_method_not_allowed_is_405_listing_every_allowed_method(
    hostile: httpx.Client, topic: str, method: str, path: str, allowed: set[str]
) -> None:
    """RFC 9110 §15.5.6: a 405 MUST carry an Allow header listing the resource's methods."""
    r = hostile.request(method, path.format(topic=topic), json={"body": "x"})
    if not allowed:  # no such resource at all
        assert_problem(r, 404)
        return
    assert_problem(r, 405)
    listed = {m.strip().upper() for m in r.headers.get("allow", "").split(",") if m.strip()}
    assert allowed <= listed, f"Allow: {r.headers.get('allow')!r}, expected {sorted(allowed)}"
    assert_nothing_stored(hostile, topic)


@pytest.mark.parametrize("method", ["FOO", "BREW"])
def test_an_unknown_method_is_refused_and_stores_nothing(
    hostile: httpx.Client, topic: str, method: str
) -> None:
    """A method HTTP does not know is refused before the app sees it: the httptools parser
    answers 400 text/plain (a protocol-level error, like a malformed request line; h11
    would be slower on every request). Nothing is stored and the server stays up."""
    r = hostile.request(method, f"/v1/topics/{topic}/messages", json={"body": "x"})
    assert r.status_code in (400, 405, 501)
    assert_nothing_stored(hostile, topic)


@pytest.mark.parametrize(
    "path", ["/healthz", "/readyz", "/openapi.json", "/v1/topics/{topic}/messages/m1"]
)
def test_head_is_get_without_the_body(hostile: httpx.Client, topic: str, path: str) -> None:
    """RFC 9110 §9.1: a general-purpose server MUST support HEAD wherever it supports GET."""
    sent = hostile.post(f"/v1/topics/{topic}/messages", json={"body": "x", "msg_id": "m1"})
    assert sent.status_code == 201, sent.text
    url = path.format(topic=topic)
    get = hostile.get(url)
    head = hostile.head(url)
    assert head.status_code == get.status_code == 200, (head.status_code, head.headers)
    assert head.content == b""
    assert head.headers.get("content-type") == get.headers.get("content-type")
