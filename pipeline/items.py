"""The batch API's items of a bulk load, built in Spark SQL: the JVM checks the rows and
writes each valid row's item as JSON, so an executor's Python only sends bytes.

``with_items`` adds two columns to the prepared rows (``bulk_load.prepare``):

- ``ITEM``: the row's item, JSON with its keys sorted (``msg_id`` first when the row has
  one), for a row every check of the service (``rows.to_message``) would pass; null for
  any other row, which goes through ``to_message`` in the executor as it is. The SQL
  here only ever says "surely valid": each condition is the service's rule or narrower
  (an ASCII-only tag, digits-only numbers in text, a properties object exactly as Spark
  writes one), so every reject, and its field and reason, still has one home, the
  service's checks (``tests/pipeline/test_items.py`` runs a table of rows through both).
  A row whose msg_id an earlier row has with other content may have an item too: that is
  found after the SQL (``bulk_load.numbered``), and the loader sends no item of such a
  row (``Loader.add_ready``).
- ``DUE``: the instant the row fixes: its ``deliver_at_ms``, ``LOCAL_DUE`` for a local
  ``deliver_at`` + ``timezone`` (its item holds ``LOCAL_PLACEHOLDER``), null for a delay.

What depends on the moment or on the time-zone database stays in the executor's Python,
with the same code as the rest: a ``deliver_at_ms`` against now and the maximum delay,
and a local time's instant (``rows.local_to_ms``: the executor's zoneinfo, which the JVM's
own tz database need not match).

An id-less row's content id is its item's sorted JSON hashed in the executor
(``rows.hashed_id``, the same bytes ``rows.content_id`` hashes): a row gets the same id
whichever path it takes, and the same as any earlier load of the file.
"""

from __future__ import annotations

from typing import Any

from app.config import Settings
from app.schemas import MSG_ID_PATTERN, NAME_PATTERN, PROPERTY_VALUE_MAX, UNADDRESSABLE_IDS
from pipeline.rows import SCHEDULE_FIELDS
from storage.keys import RESERVED_PREFIXES
from workers.rules.retry import DELAY_LEVELS_MS
from workers.rules.tagfilter import TAG_MAX

ITEM = "__rt_item"
DUE = "__rt_due"
_OK, _PARSED = "__rt_ok", "__rt_parsed"  # internal to with_items
LOCAL_DUE = -1  # DUE of a row with a local time: the executor computes the instant
LOCAL_PLACEHOLDER = b'"deliver_at_ms":-1'  # its place in the item (only a key can match)
_BASE64 = r"^[A-Za-z0-9+/]*={0,2}\z"  # binascii's alphabet (validate=True), padding at the end
# A tag every filter can name: printable ASCII but space, '|' and '*' (TAG_MAX of them).
_TAG = rf"^[\x21-\x29\x2b-\x7b\x7d\x7e]{{1,{TAG_MAX}}}\z"
_DIGITS = r"^[0-9]{1,18}\z"  # a number in text that surely fits a long


def java_pattern(pattern: str) -> str:
    """A schema's ``^…$`` pattern for Java's regex: ``$`` there also matches before a final
    newline, ``\\z`` only at the end (as pydantic's and ``re.fullmatch``)."""
    return pattern.removesuffix("$") + r"\z"


def with_items(rows: Any, settings: Settings) -> Any:
    """``rows`` with ``ITEM`` and ``DUE`` (see the module). Properties as a map of strings
    (``prepare(..., string_maps=True)``) are read as they are and become their JSON text,
    as ``prepare`` writes any other; properties as text are parsed once, a key given twice
    its last value, as ``orjson`` reads it (the session's ``mapKeyDedupPolicy``)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    rows.sparkSession.conf.set("spark.sql.mapKeyDedupPolicy", "LAST_WIN")
    kind = {f.name: f.dataType for f in rows.schema.fields}.get("properties")
    native = isinstance(kind, T.MapType)
    if native:  # the text: what the executor and the rejects read, and its checks
        rows = rows.withColumn(_PARSED, F.col("properties")).withColumn(
            "properties", F.to_json("properties")
        )
    elif isinstance(kind, T.StringType):  # parsed once, for its checks and the item
        rows = rows.withColumn(_PARSED, F.from_json("properties", "map<string,string>"))
    c = _Columns(rows.schema)
    checks = c.fields(settings)
    at, delay, level, local = c.schedule(settings, checks)
    properties = c.properties(settings, checks, native)
    fields = {
        "body": c.col("body") if c.is_text("body") else c.null,
        "body_encoding": c.value("body_encoding"),
        "delay_level": level,
        "delay_ms": delay,
        "deliver_at_ms": F.when(local, F.lit(LOCAL_DUE).cast("long")).otherwise(at),
        "properties": properties,
        "tag": c.value("tag"),
    }
    ordered = [c.value("msg_id").alias("msg_id")]
    ordered += [fields[name].alias(name) for name in sorted(fields)]
    # One verdict a row (a column of its own: both columns below read it).
    rows = rows.withColumn(_OK, _all(F, checks))
    item = F.to_json(F.struct(*ordered), {"ignoreNullFields": "true"}).cast("binary")
    return (
        rows.withColumn(ITEM, F.when(F.col(_OK), item))
        .withColumn(DUE, F.when(F.col(_OK), fields["deliver_at_ms"]))
        .drop(_OK, _PARSED)
    )


class _Columns:
    """The input's columns as ``to_message`` reads them, and what each check needs."""

    def __init__(self, schema: Any) -> None:
        from pyspark.sql import functions as F

        self.types = {f.name: f.dataType for f in schema.fields}
        self.null = F.lit(None)

    def col(self, name: str) -> Any:
        from pyspark.sql import functions as F

        return F.col(name) if name in self.types else self.null

    def text(self, name: str) -> Any:
        """A text column; null text for any other (its checks then fail, and no string
        function is given a number)."""
        from pyspark.sql import functions as F

        return F.col(name) if self.is_text(name) else self.null.cast("string")

    def is_text(self, name: str) -> bool:
        from pyspark.sql import types as T

        return isinstance(self.types.get(name), T.StringType)

    def given(self, name: str) -> Any:
        """The row gives ``name`` (to_message: not None and not "")."""
        from pyspark.sql import functions as F

        if name not in self.types:
            return F.lit(False)
        if self.is_text(name):
            return F.col(name).isNotNull() & (F.col(name) != "")
        return F.col(name).isNotNull()

    def value(self, name: str) -> Any:
        """A text field's value when given (null otherwise)."""
        from pyspark.sql import functions as F

        return F.when(self.given(name), F.col(name)) if self.is_text(name) else self.null

    def text_or_absent(self, name: str) -> Any:
        """``name`` is absent, or text (to_message sends any other type as it is, and
        the schema refuses it)."""
        from pyspark.sql import functions as F

        return F.lit(True) if self.is_text(name) else ~self.given(name)

    def number(self, name: str) -> tuple[Any, Any]:
        """(a given ``name`` is a whole number to_message reads as such, its value)."""
        from pyspark.sql import functions as F
        from pyspark.sql import types as T

        if isinstance(self.types.get(name), T.IntegralType):
            return F.lit(True), F.col(name).cast("long")
        if self.is_text(name):
            digits = F.col(name).rlike(_DIGITS)
            return digits, F.when(digits, F.col(name).cast("long"))
        return F.lit(False), self.null.cast("long")

    def fields(self, settings: Settings) -> list[Any]:
        """The checks of the row's numbering, topic, msg_id, body and tag."""
        from pyspark.sql import functions as F
        from pyspark.sql import types as T

        from pipeline.bulk_load import CORRUPT

        # A line Spark could not parse. (A msg_id an earlier row has with other content is
        # found after the SQL, by ``bulk_load.numbered``: ``Loader.add_ready`` sends that
        # row's item nowhere and ``to_message`` checks the row.)
        checks = [self.col(CORRUPT).isNull()] if CORRUPT in self.types else []
        # topic: the name pattern, writable (to_message reads it as text: a number is one).
        if isinstance(self.types.get("topic"), T.StringType | T.IntegralType):
            topic = F.col("topic").cast("string")
            checks.append(topic.rlike(java_pattern(NAME_PATTERN)))
            checks.append(~_any(F, [topic.startswith(p) for p in RESERVED_PREFIXES]))
        else:
            checks.append(F.lit(False))
        # msg_id: the pattern, and a URL can name it.
        msg_id = self.text("msg_id")
        checks.append(
            ~self.given("msg_id")
            | (
                F.lit(self.is_text("msg_id"))
                & msg_id.rlike(java_pattern(MSG_ID_PATTERN))
                & ~msg_id.isin(*UNADDRESSABLE_IDS)
            )
        )
        # body: text; utf8 within the limit, or base64 in its alphabet, padded, decoded
        # within the limit.
        body, encoding = self.text("body"), self.text("body_encoding")
        checks.append(F.lit(self.is_text("body")) & body.isNotNull())
        checks.append(self.text_or_absent("body_encoding"))
        size = F.octet_length(body)
        decoded = F.floor(size / 4) * 3 - (size - F.octet_length(F.rtrim(body, F.lit("="))))
        utf8 = ~self.given("body_encoding") | (encoding == "utf8")
        base64 = (encoding == "base64") & (size % 4 == 0) & body.rlike(_BASE64)
        checks.append(
            (utf8 & (size <= settings.max_body_bytes))
            | (base64 & (decoded <= settings.max_body_bytes))
        )
        # tag: one every tag filter can name.
        checks.append(
            ~self.given("tag") | (F.lit(self.is_text("tag")) & self.text("tag").rlike(_TAG))
        )
        return checks

    def schedule(self, settings: Settings, checks: list[Any]) -> tuple[Any, Any, Any, Any]:
        """(deliver_at_ms, delay_ms, delay_level, the row has a local time) and their checks
        (at most one of them; a deliver_at_ms's distance from now is the executor's)."""
        from pyspark.sql import functions as F

        values = []
        for name in SCHEDULE_FIELDS:
            whole, value = self.number(name)
            values.append(F.when(self.given(name), value))
            checks.append(~self.given(name) | whole)
        at, delay, level = values
        levels = sum(1 for ms in DELAY_LEVELS_MS if ms <= settings.max_delay_ms)  # in order
        checks.append(at.isNull() | (at >= 0))
        checks.append(delay.isNull() | ((delay >= 0) & (delay <= settings.max_delay_ms)))
        checks.append(level.isNull() | ((level >= 1) & (level <= levels)))
        schedules = sum((self.given(n).cast("int") for n in SCHEDULE_FIELDS), F.lit(0))
        checks.append(schedules <= 1)
        local = self.given("deliver_at") if self.is_text("deliver_at") else F.lit(False)
        checks.append(self.text_or_absent("deliver_at"))
        checks.append(self.text_or_absent("timezone"))
        checks.append(~local | (schedules == 0))
        checks.append(local | ~self.given("timezone"))
        return at, delay, level, local

    def properties(self, settings: Settings, checks: list[Any], native: bool) -> Any:
        """The properties sorted by key (as the content id hashes them) and their checks:
        a JSON object of strings exactly as Spark writes one (no key twice, no other
        spacing, no number), within the limits."""
        from pyspark.sql import functions as F

        if not self.is_text("properties"):
            checks.append(~self.given("properties"))
            return self.null
        text = F.col("properties")
        parsed = F.col(_PARSED)
        # Spark's own JSON of a map of strings needs no second look (but a key twice, which
        # a map read from a file may hold: to_json writes both); other text must be exactly
        # what Spark would write of it (no number read as text, no other spacing).
        keys = F.map_keys(parsed)
        canonical = (
            F.size(F.array_distinct(keys)) == F.size(keys) if native else F.to_json(parsed) == text
        )
        checks.append(
            ~self.given("properties")
            | (
                parsed.isNotNull()
                & canonical
                # no value longer than allowed: none can be, the whole is no longer
                & (F.octet_length(text) <= PROPERTY_VALUE_MAX)
                & (F.instr(text, '":null') == 0)  # no null value (a string has \" before)
                & (F.size(parsed) <= settings.max_properties)
            )
        )
        return F.when(
            self.given("properties"), F.map_from_entries(F.sort_array(F.map_entries(parsed)))
        )


def _all(F: Any, conditions: list[Any]) -> Any:
    """Every condition true (one unknown, null, is a no)."""
    out = conditions[0]
    for c in conditions[1:]:
        out = out & c
    return F.coalesce(out, F.lit(False))


def _any(F: Any, conditions: list[Any]) -> Any:
    out = F.lit(False)
    for c in conditions:
        out = out | F.coalesce(c, F.lit(False))
    return out
