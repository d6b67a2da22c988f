"""Progress on long work (items done, rate, time left), written to stderr only: stdout is parsed.

One helper for every command that can run over a minute (`judge`, `certify`, `label-next`, `induce`,
`cascade fit`): `progress(total, desc)` returns a reporter with ``update(n)`` and ``close()``.

- On a terminal (stderr is a TTY) it is a tqdm bar.
- Elsewhere (a log file, CI, a pipe) it is quiet except for one line every `every` seconds
  (``"certify: 40/120 verdicts, 0.7/s, about 1m54s left"``) and a closing line when it wrote any: a run
  shorter than `every` writes nothing.
  ``RUBRICFORGE_PROGRESS_SECONDS`` in the environment overrides `every` (``0``: a line per item).
- Off (`NullProgress`) unless asked: ``enabled=True``, or inside `requested()`, which the command line
  sets for the whole command, so a library loop that draws nothing from Python (``progress=False``) reports
  from the command line.

A loop of the library hooks it with one line, e.g. ``bar = progress(len(items), "cascade fit")`` then
``bar.update(1)`` per item and ``bar.close()`` at the end.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Iterator, TextIO

__all__ = ["DEFAULT_EVERY_SECONDS", "LineProgress", "NullProgress", "format_seconds", "is_requested", "progress",
           "requested"]

DEFAULT_EVERY_SECONDS = 30.0
_REQUESTED: ContextVar[bool] = ContextVar("rubricforge_progress", default=False)


@contextmanager
def requested(on: bool = True) -> Iterator[None]:
    """Within this block, `progress` reports even where its caller did not ask (the command line's scope)."""
    token = _REQUESTED.set(on)
    try:
        yield
    finally:
        _REQUESTED.reset(token)


def is_requested() -> bool:
    """True inside `requested()`."""
    return _REQUESTED.get()


def format_seconds(seconds: float) -> str:
    """``"45s"``, ``"3m05s"``, ``"1h02m"``."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class NullProgress:
    """A reporter that reports nothing."""

    def update(self, n: int = 1) -> None:
        """Nothing."""

    def set_postfix(self, refresh: bool = False, **counts: Any) -> None:
        """Nothing."""

    def close(self) -> None:
        """Nothing."""

    def __enter__(self) -> "NullProgress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LineProgress:
    """A line every `every` seconds on `stream` (items done, rate, time left), and a closing line if it wrote
    any. Thread-safe (a judge's workers update it). `clock` is injectable for tests."""

    def __init__(self, total: int | None, desc: str, unit: str = "item", *, stream: TextIO | None = None,
                 every: float = DEFAULT_EVERY_SECONDS, clock: Callable[[], float] = time.monotonic):
        self.total, self.desc, self.unit, self.every, self.clock = total, desc, unit, every, clock
        self.stream = stream if stream is not None else sys.stderr
        self.n, self.lines = 0, 0
        self.postfix: dict[str, Any] = {}
        self.start = self.last = clock()
        self._lock = threading.Lock()
        self._closed = False

    def line(self) -> str:
        """The current line: ``"desc: done/total unit, rate/s, about T left"``."""
        elapsed = max(self.clock() - self.start, 1e-9)
        rate = self.n / elapsed
        done = f"{self.n}/{self.total}" if self.total is not None else str(self.n)
        text = f"{self.desc}: {done} {self.unit}s, {rate:.2f}/s, {format_seconds(elapsed)} elapsed"
        if self.total is not None and rate > 0 and self.n < self.total:
            text += f", about {format_seconds((self.total - self.n) / rate)} left"
        if self.postfix:
            text += " (" + ", ".join(f"{key} {value}" for key, value in self.postfix.items()) + ")"
        return text

    def set_postfix(self, refresh: bool = False, **counts: Any) -> None:
        """Counts shown at the end of the next line (tqdm's signature: ``abstained=2, cached=5``)."""
        with self._lock:
            self.postfix = dict(counts)

    def update(self, n: int = 1) -> None:
        """Count `n` more items done; write a line when `every` seconds have passed since the last one."""
        with self._lock:
            self.n += n
            now = self.clock()
            if now - self.last >= self.every:
                self.last = now
                self._write(self.line())

    def close(self) -> None:
        """Write the closing line (only when a line was written before: a short run stays silent)."""
        with self._lock:
            if not self._closed and self.lines:
                self._write(self.line() + " (done)")
            self._closed = True

    def _write(self, text: str) -> None:
        self.lines += 1
        print(text, file=self.stream, flush=True)

    def __enter__(self) -> "LineProgress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress(total: int | None, desc: str, unit: str = "item", *, enabled: bool | None = None,
             stream: TextIO | None = None, every: float = DEFAULT_EVERY_SECONDS) -> Any:
    """A progress reporter for `total` items (None: unknown) on stderr.

    Args:
        total: how many items the work has, or None.
        desc: what runs (``"certify"``, ``"induce"``), the line's first word.
        unit: the item's name (``"verdict"``, ``"judge call"``).
        enabled: True to report, False never; None (default): only inside `requested()`.
        stream: where to write (default ``sys.stderr``; never stdout: outputs there are parsed).
        every: seconds between two lines when `stream` is not a terminal.

    Returns:
        A tqdm bar on a terminal, a `LineProgress` elsewhere, a `NullProgress` when off; each has
        ``update(n)`` and ``close()``.
    """
    if enabled is None:
        enabled = is_requested()
    if not enabled:
        return NullProgress()
    stream = stream if stream is not None else sys.stderr
    every = float(os.environ.get("RUBRICFORGE_PROGRESS_SECONDS", every))
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, unit=unit, file=stream, dynamic_ncols=True, smoothing=0.1)
    return LineProgress(total, desc, unit, stream=stream, every=every)
