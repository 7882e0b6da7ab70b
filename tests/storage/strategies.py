"""Hypothesis strategies for the names and ids the API admits (api.md, Conventions)."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st

NAME_RE = r"[%|a-zA-Z0-9_-]{1,127}"
MSG_ID_RE = r"[A-Za-z0-9._:-]{1,128}"

names = st.from_regex(NAME_RE, fullmatch=True)
msg_ids = st.from_regex(MSG_ID_RE, fullmatch=True)
# Narrow alphabets make equal prefixes (and so the separator's role) common.
short_names = st.text(alphabet="%|aAz0_-", min_size=1, max_size=4)
short_ids = st.text(alphabet=".:aZ9-", min_size=1, max_size=4)
u64s = st.integers(min_value=0, max_value=2**64 - 1)
dues = st.one_of(u64s, st.integers(min_value=0, max_value=3))

# No per-example deadline: on a loaded two-core machine one slow example is not a bug.
relaxed = settings(deadline=None)
