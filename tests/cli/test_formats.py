"""The CLI's pure parts by table: durations and times people type, numbers people read."""

from __future__ import annotations

import pytest

from cli.batchfile import csv_rows, jsonl
from cli.show import count
from cli.times import duration, parse_duration_ms, parse_time_ms, when


@pytest.mark.parametrize(
    ("text", "ms"),
    [("250ms", 250), ("500ms", 500), ("5s", 5_000), ("1.5s", 1_500), ("10m", 600_000),
     ("10min", 600_000), ("2h", 7_200_000), ("1d", 86_400_000), (" 3 S ", 3_000)],
)  # fmt: skip
def test_durations(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "5 parsecs", "-1s", "s", "1e3"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration_ms(text)


@pytest.mark.parametrize("text", ["5", " 250 ", "1.5"])
def test_a_duration_needs_its_unit(text: str) -> None:
    """A bare number is 5 ms to one reader and 5 s to the next: refused, not guessed."""
    with pytest.raises(ValueError, match=f"^{text.strip()} has no unit: write {text.strip()}ms"):
        parse_duration_ms(text)


def test_times() -> None:
    assert parse_time_ms("1700000000000") == 1_700_000_000_000
    assert parse_time_ms("2030-01-31T09:00:00Z") == 1_896_080_400_000
    assert parse_time_ms("2030-01-31T10:00:00+01:00") == 1_896_080_400_000
    with pytest.raises(ValueError, match="not a time"):
        parse_time_ms("next tuesday")


@pytest.mark.parametrize(
    ("ms", "text"),
    [(0, "0 ms"), (999, "999 ms"), (1_000, "1 s"), (1_234, "1.2 s"), (90_000, "1 min 30 s"),
     (7_200_000, "2 h"), (93_784_000, "1 d 2 h"), (-5_000, "5 s")],
)  # fmt: skip
def test_duration_text(ms: int, text: str) -> None:
    assert duration(ms) == text


def test_when() -> None:
    at = 1_896_080_400_000
    assert when(at, at - 3 * 86_400_000) == "2030-01-31 09:00:00 UTC (in 3 d)"
    assert when(at, at + 90_000) == "2030-01-31 09:00:00 UTC (1 min 30 s ago)"
    assert when(at, at + 10) == "2030-01-31 09:00:00 UTC (now)"


@pytest.mark.parametrize(
    ("n", "text"),
    [(0, "0"), (9_999, "9999"), (10_000, "10k"), (12_345, "12.3k"), (999_999, "1M"),
     (1_234_567, "1.2M"), (3_000_000_000, "3G")],
)  # fmt: skip
def test_count(n: int, text: str) -> None:
    assert count(n) == text


def test_file_shapes() -> None:
    items = list(jsonl(['{"body": "a"}', "", "[1]", '{"body": 5}', '{"body": "b", "x": 1}']))
    assert [(i.line, i.error) for i in items] == [
        (1, None),
        (3, "not a JSON object"),
        (4, "body: a string is required"),
        (5, items[3].error),
    ]
    assert (items[3].error or "").startswith("unknown field 'x'")
    rows = list(csv_rows(["body,delay_ms,properties.k", "a,5,v", "b,soon,", "c,,,extra"]))
    assert rows[0].message is not None
    assert rows[0].message.to_dict() == {"body": "a", "delay_ms": 5, "properties": {"k": "v"}}
    assert [(r.line, r.error) for r in rows[1:]] == [
        (3, "delay_ms: 'soon' is not an integer"),
        (4, "more cells than header columns"),
    ]
    (bad_header,) = csv_rows(["text,msg_id", "a,b"])
    assert (bad_header.error or "").startswith("unknown column 'text'")
