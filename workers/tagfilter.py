"""Tag filters (RocketMQ's tag expressions): ``*`` or tags joined by ``||``, spaces
ignored. A group with a filter receives only the messages whose tag it names."""

from __future__ import annotations

import functools

EXPRESSION = r"^\s*(\*|[^|\s*]+(\s*\|\|\s*[^|\s*]+)*)\s*$"  # validated by GroupSettings
MATCH_ALL = "*"
PARSED_CACHE = 1_024  # distinct expressions kept parsed (bounded)


@functools.lru_cache(maxsize=PARSED_CACHE)
def tags(expression: str) -> frozenset[str] | None:
    """The tags an expression names; None for ``*`` (every message, tagged or not)."""
    if expression.strip() == MATCH_ALL:
        return None
    return frozenset(t.strip() for t in expression.split("||"))
