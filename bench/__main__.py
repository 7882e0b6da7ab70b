"""``python -m bench`` (``make bench``): every figure, one table on stdout.

BENCH_SCALE=full for the full sizes, BENCH_STORM_N to size the storm; progress goes to
stderr. See bench/README.md for what each figure measures.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from bench import batch, lateness, report, scale, send, storm


def main() -> None:
    s = scale.current()
    figures: tuple[tuple[str, Callable[[], list[report.Row]]], ...] = (
        (
            "1 single send vs bare FastAPI",
            lambda: send.run_figure(warmup_s=s.send_warmup_s, seconds=s.send_seconds),
        ),
        ("2 batch send vs raw WriteBatch", lambda: batch.run_figure(batches=s.batches)),
        ("3 lateness", lambda: lateness.run_figure(seconds=s.lateness_seconds)),
        ("4 storm", lambda: storm.run_figure(n=s.storm_n)),
    )
    rows: list[report.Row] = []
    started = time.monotonic()
    for name, figure in figures:
        print(f"[bench {s.name}] figure {name} ...", file=sys.stderr, flush=True)
        rows += figure()
    took = time.monotonic() - started
    print(f"[bench {s.name}] done in {took:.0f} s", file=sys.stderr, flush=True)
    print(report.table(rows, s.name))


if __name__ == "__main__":
    main()
