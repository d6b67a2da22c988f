"""Where each saved label goes next (``rubricforge review --to-mlflow``): a background sender, one line at a time.

The page appends a line to the labels file and answers at once; `LabelSender` then hands the line to the
``on_label`` callback (the MLflow sink) from a thread of its own. Lines are sent one at a time, in the order
they were put (`ReviewState` puts them in the order it writes them, under its write lock, so the file's
order is the order sent). A callback that is slow or fails never holds up a request: a failure is counted
in `SinkStatus` (shown on every page) and the line stays in the file. How long one send may take is the
callback's business (the MLflow sink bounds its HTTP calls to seconds).

`LabelSender.close` sends what is still waiting, then stops; interrupted (a second Ctrl-C), every line not
yet sent is counted as failed, so none is lost silently.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rubricforge_dspy.core.errors import RubricForgeError
from rubricforge_dspy.data.label_journal import JournalLine

logger = logging.getLogger(__name__)

__all__ = ["LabelSender", "SinkStatus"]



@dataclass
class SinkStatus:
    """What the ``on_label`` callback (e.g. the MLflow sink) did: lines sent, failed (with the last error), and
    waiting to be sent."""

    name: str = ""
    sent: int = 0
    failed: int = 0
    last_error: str | None = None
    failed_ids: list[str] = field(default_factory=list)
    pending: int = 0


class LabelSender:
    """Send journal lines to `send` from one background thread, in the order they are put (module docstring).

    Args:
        send: the callback, given one `JournalLine` at a time; an exception is a failed send.
        status: the counts to keep (shown by the page).
        journal: the labels file, named in the log line of a failed send.
    """

    def __init__(self, send: Callable[[JournalLine], Any], status: SinkStatus, journal: str = "the labels file"):
        self._send, self.status, self._journal = send, status, journal
        self._queue: queue.SimpleQueue[JournalLine | None] = queue.SimpleQueue()
        self._waiting: deque[JournalLine] = deque()  # put and not yet done, oldest first (the one being sent)
        self._idle = threading.Condition()
        self._abandoned = False
        self._thread = threading.Thread(target=self._run, name="review-label-sender", daemon=True)
        self._thread.start()

    def put(self, line: JournalLine) -> None:
        """Queue `line` to be sent after every line put before it; returns at once."""
        with self._idle:
            self._waiting.append(line)
            self.status.pending += 1
        self._queue.put(line)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every line put so far is sent or failed; False when `timeout` (seconds) passes first."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._waiting, timeout)

    def close(self) -> None:
        """Send the lines still waiting, then stop the thread. Interrupted (Ctrl-C), every line not yet done is
        counted as failed and the thread is left to end with the process."""
        with self._idle:
            left = len(self._waiting)
        if left:
            logger.warning("sending the last %d label action(s) to %s (Ctrl-C to stop: they stay in %s and are "
                           "counted as not sent)", left, self.status.name, self._journal)
        self._queue.put(None)  # the stop mark
        try:
            self._thread.join()
        except KeyboardInterrupt:
            self._abandon("not sent: the review was stopped before it was sent")

    def _abandon(self, why: str) -> None:
        with self._idle:
            self._abandoned = True
            for line in self._waiting:
                self.status.failed += 1
                self.status.failed_ids.append(line.id)
            if self._waiting:
                self.status.last_error = why
            self.status.pending = 0
            self._waiting.clear()
            self._idle.notify_all()

    def _run(self) -> None:
        while (line := self._queue.get()) is not None:
            try:
                self._send(line)
            except Exception as error:  # any failure of the callback: counted and shown, the line stays in the file
                self._done(line, error)
            else:
                self._done(line, None)

    def _done(self, line: JournalLine, error: Exception | None) -> None:
        why = f"{type(error).__name__}: {error}" if error is not None else None
        with self._idle:
            if self._abandoned:  # already counted by `close`
                return
            self._waiting.popleft()
            self.status.pending -= 1
            if error is None:
                self.status.sent += 1
            else:
                self.status.failed += 1
                self.status.failed_ids.append(line.id)
                self.status.last_error = why
            self._idle.notify_all()
        if error is not None:
            logger.error("label of %s (%s) is in %s but NOT in %s: %s", line.id, line.state, self._journal,
                         self.status.name, why, exc_info=not isinstance(error, RubricForgeError))
