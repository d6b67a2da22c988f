"""Progress on long work: a line every N seconds off a terminal, silent when short, never on stdout."""

import io

from rubricforge_dspy.core.progress import LineProgress, NullProgress, format_seconds, progress, requested


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_a_line_every_n_seconds_with_done_rate_and_time_left():
    stream, clock = io.StringIO(), Clock()
    bar = LineProgress(100, "certify", "verdict", stream=stream, every=30, clock=clock)
    for _ in range(10):
        clock.now += 2
        bar.update(1)  # 20 s: no line yet
    assert stream.getvalue() == ""
    for _ in range(10):
        clock.now += 2
        bar.update(1)
    bar.close()
    lines = stream.getvalue().splitlines()
    assert lines[0] == "certify: 15/100 verdicts, 0.50/s, 30s elapsed, about 2m50s left"
    assert lines[-1].startswith("certify: 20/100 verdicts") and lines[-1].endswith("(done)")
    assert len(lines) == 2


def test_a_short_run_writes_nothing():
    stream, clock = io.StringIO(), Clock()
    with LineProgress(5, "judging", stream=stream, every=30, clock=clock) as bar:
        for _ in range(5):
            clock.now += 1
            bar.update(1)
    assert stream.getvalue() == ""


def test_progress_is_off_unless_asked_and_on_inside_the_command_lines_scope():
    stream = io.StringIO()
    assert isinstance(progress(3, "x", stream=stream), NullProgress)
    with requested():
        assert isinstance(progress(3, "x", stream=stream), LineProgress)  # a StringIO is no terminal
    assert isinstance(progress(3, "x", stream=stream), NullProgress)


def test_format_seconds():
    assert [format_seconds(s) for s in (4.4, 185, 3720)] == ["4s", "3m05s", "1h02m"]
