"""The background label sender (`review.sink.LabelSender`): lines go to the callback one at a time in the order they
were put, `put` never waits for the callback, failures are counted with their ids, and `close` sends what is left."""

from __future__ import annotations

import threading

from rubricforge_dspy.data.label_journal import JournalLine
from rubricforge_dspy.review.sink import LabelSender, SinkStatus


def line(ident: str, label: int | None = 1) -> JournalLine:
    return JournalLine(id=ident, label=label, skip=False, note="", labeler="tester", time="t", undo=False, line=0)


def test_lines_are_sent_one_at_a_time_in_order_and_put_never_waits_for_the_callback():
    gate, sent, inside, most = threading.Event(), [], [0], [0]
    lock = threading.Lock()

    def send(item: JournalLine) -> None:
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        try:
            gate.wait()  # the callback hangs until the test lets it go
            if item.id == "b":
                raise ConnectionError("MLflow went away")
            sent.append(item.id)
        finally:
            with lock:
                inside[0] -= 1

    status = SinkStatus(name="MLflow")
    sender = LabelSender(send, status)
    for ident in "abcd":
        sender.put(line(ident))  # returns although the callback is stuck on "a"
    assert status.pending == 4 and status.sent == 0
    assert not sender.wait(timeout=0.05)  # nothing can finish while the callback hangs
    gate.set()
    assert sender.wait(timeout=30)
    assert sent == ["a", "c", "d"] and most[0] == 1  # in order, never two at once
    assert (status.sent, status.failed, status.failed_ids, status.pending) == (3, 1, ["b"], 0)
    assert status.last_error == "ConnectionError: MLflow went away"
    sender.close()


def test_close_sends_what_is_still_waiting():
    gate, sent = threading.Event(), []
    status = SinkStatus(name="MLflow")
    sender = LabelSender(lambda item: (gate.wait(), sent.append(item.id)), status)
    sender.put(line("a"))
    sender.put(line("b", None))
    gate.set()
    sender.close()
    assert sent == ["a", "b"] and (status.sent, status.pending) == (2, 0)
