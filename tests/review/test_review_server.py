"""The review server, reached over real HTTP (httpx) on 127.0.0.1: the token, the CSRF check, the headers,
what a request may name, and the evidence shown being exactly the judge's."""

from __future__ import annotations

import html
import re
import socket
from contextlib import contextmanager

import httpx
import pytest

from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory
from rubricforge_dspy.review.security import COOKIE
from tests.review.conftest import DEMO_DATA, journal_lines


@contextmanager
def client(server, *, token=True):
    """An httpx client of the server; with `token`, holding the cookie the token URL sets."""
    with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", follow_redirects=False, timeout=30) as c:
        if token:
            first = c.get(f"/?token={server.token}")
            assert first.status_code == 303 and first.headers["location"] == "/"
            cookie = first.headers["set-cookie"]
            assert "HttpOnly" in cookie and "samesite=strict" in cookie.lower()
        yield c


def test_every_page_needs_the_token(demo_server):
    with client(demo_server, token=False) as c:
        for path in ("/", "/item/0", "/judge", "/commands", "/static/review.js", "/figure/reliability"):
            assert c.get(path).status_code == 403, path
        assert c.get("/?token=not-the-token").status_code == 403
        assert c.get("/", cookies={f"{COOKIE}_{demo_server.port}": "not-the-token"}).status_code == 403
        assert c.get("/healthz").text == "ok\n"  # the readiness check shows nothing
    with socket.create_connection(("127.0.0.1", demo_server.port), timeout=30) as raw:  # a path httpx would tidy
        raw.sendall(f"GET //evil.example/?token={demo_server.token} HTTP/1.1\r\n"
                    f"Host: 127.0.0.1:{demo_server.port}\r\nConnection: close\r\n\r\n".encode())
        head = raw.makefile("rb").read().split(b"\r\n\r\n")[0].decode()
    assert " 303 " in head.splitlines()[0] and "location: /evil.example/" in head.lower()  # stays on this server
    with client(demo_server) as c:
        page = c.get("/")
        assert page.status_code == 200 and "0 of 4 labeled" in page.text
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "default-src 'none'" in csp and "unsafe-inline" not in csp
        assert page.headers["x-content-type-options"] == "nosniff"
        assert page.headers["referrer-policy"] == "no-referrer"
        assert "<script>" not in page.text  # no inline script, only <script src=...>


def test_a_post_needs_the_cookie_and_the_csrf_token(demo_server, demo_inputs):
    csrf = demo_server.app.state.guard.csrf
    form = {"index": "0", "choice": "pass", "note": ""}
    with client(demo_server, token=False) as c:
        assert c.post("/label", data={**form, "csrf": csrf}).status_code == 403  # no cookie
        assert c.post("/undo", data={"csrf": csrf}).status_code == 403
    with client(demo_server) as c:
        assert c.post("/label", data=form).status_code == 403  # cookie, no CSRF token
        assert c.post("/label", data={**form, "csrf": "0" * 64}).status_code == 403
        assert not demo_inputs.labels_out.exists() or journal_lines(demo_inputs.labels_out) == []
        done = c.post("/label", data={**form, "csrf": csrf})
        assert done.status_code == 303 and done.headers["location"].startswith("/item/")
        by_header = c.post("/label", data={"index": "1", "choice": "fail"}, headers={"X-CSRF-Token": csrf})
        assert by_header.status_code == 303
    assert [(l["label"], l["labeler"]) for l in journal_lines(demo_inputs.labels_out)] == [(1, "tester"), (0, "tester")]


def test_a_request_for_another_host_is_refused(demo_server):
    with client(demo_server) as c:
        assert c.get("/", headers={"host": "evil.example:80"}).status_code == 403
        assert c.get("/", headers={"host": f"localhost:{demo_server.port}"}).status_code == 200


def test_nothing_is_addressed_by_path(demo_server):
    with client(demo_server) as c:
        assert c.get("/item/4").status_code == 404  # 4 items: 0..3
        assert c.get("/item/-1").status_code == 404
        assert c.get("/figure/..%2F..%2Finduced").status_code == 404
        assert c.get("/figure/reliability").headers["content-type"] == "image/png"
        assert c.get("/static/..%2F..%2Fstate.py").status_code == 404
        assert c.post("/label", data={"index": "99", "choice": "pass",
                                      "csrf": demo_server.app.state.guard.csrf}).status_code == 400


def test_the_item_page_shows_exactly_the_text_the_judge_read(demo_server):
    """The evidence is `render_trajectory` of the loaded trajectory under the program's render, byte for byte."""
    trajectories = {t.id: t for t in load_trajectories(DEMO_DATA)}
    config = RenderConfig(max_tokens=900, max_step_chars=300)  # the demo program's render (its manifest)
    state = demo_server.state
    assert state.render == config
    with client(demo_server) as c:
        for index in (0, 2, 3):
            page = c.get(f"/item/{index}").text
            shown = re.search(r'<pre id="evidence"[^>]*>(.*?)</pre>', page, re.S)[1]
            text = html.unescape(re.sub(r"</?span[^>]*>", "", shown))
            assert text == render_trajectory(trajectories[state.verdicts.ids[index]], config)
            assert '<span class="tag">' in shown and '<span class="quote">' in shown  # quotes shown as such


def test_the_judge_page_shows_rubric_candidates_diff_certificate_and_figures(demo_server):
    with client(demo_server) as c:
        page = c.get("/judge?a=0&b=1").text
    assert "Goal fulfilled" in page and "candidate 0" in page and "false_pass" in page
    assert '<img src="/figure/reliability"' in page and 'id="diff"' in page


def test_the_commands_page_names_the_labels_file(demo_server, demo_inputs):
    with client(demo_server) as c:
        page = html.unescape(c.get("/commands").text)
    assert f"--labels {demo_inputs.labels_out}" in page and "--init" in page and "rubricforge certify" in page


def test_a_non_loopback_address_needs_the_explicit_flag(demo_inputs):
    from rubricforge_dspy.core.errors import InputError
    from rubricforge_dspy.review import ReviewExposedWarning, ReviewServer, ReviewState

    state = ReviewState(demo_inputs)
    try:
        with pytest.raises(InputError, match="--allow-remote"):
            ReviewServer(state, host="0.0.0.0")
        with pytest.warns(ReviewExposedWarning, match="not encrypted"):
            server = ReviewServer(state, host="0.0.0.0", allow_remote=True)  # bound, never served
        server.sock.close()
        assert server.app.state.guard.hosts == {f"0.0.0.0:{server.port}"}
    finally:
        state.close()


def test_a_label_the_disk_refuses_is_answered_not_saved_on_the_page(demo_server, demo_inputs, monkeypatch):
    """A full disk at the 2nd label: the answer is an error status with a page saying "not saved" and why (what
    the browser shows after the form's submit: review.js submits the form, it does not fetch), the file keeps
    only whole lines, and the next label is saved after it."""
    import errno
    import os

    labels = demo_server.state.labels
    real_write = os.write
    writes = []

    def write(fd, data):
        if fd == labels._fd:
            writes.append(len(data))
            if len(writes) == 2:
                real_write(fd, bytes(data[:10]))
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    csrf = demo_server.app.state.guard.csrf
    ids = demo_server.state.verdicts.ids
    with client(demo_server) as c:
        assert c.post("/label", data={"index": "0", "choice": "pass", "csrf": csrf}).status_code == 303
        refused = c.post("/label", data={"index": "1", "choice": "fail", "note": "wrong date", "csrf": csrf})
        assert refused.status_code == 507 and refused.headers["content-type"].startswith("text/html")
        shown = html.unescape(re.sub(r"<[^>]+>", "", refused.text))
        assert "not saved" in shown and "No space left on device" in shown and ids[1] in shown
        assert 'href="/item/1"' in refused.text  # back to the item, to label it again
        assert "none yet" in c.get("/item/1").text and "1 of 4 labeled" in c.get("/").text
        assert c.post("/label", data={"index": "2", "choice": "fail", "csrf": csrf}).status_code == 303
    monkeypatch.undo()
    assert [(l["id"], l["label"]) for l in journal_lines(demo_inputs.labels_out)] == [(ids[0], 1), (ids[2], 0)]


def test_a_verdict_file_rewritten_while_the_page_runs_is_refused_never_mixing_ids(demo_inputs, tmp_path):
    import dataclasses
    import shutil

    from tests.review.conftest import DEMO_VERDICTS, start

    verdicts = tmp_path / "verdicts.jsonl"
    shutil.copyfile(DEMO_VERDICTS, verdicts)
    server = start(dataclasses.replace(demo_inputs, verdicts=verdicts))
    try:
        csrf = server.app.state.guard.csrf
        with client(server) as c:
            assert c.get("/item/0").status_code == 200
            lines = verdicts.read_bytes().splitlines(keepends=True)
            verdicts.write_bytes(b"".join(reversed(lines)))  # rewritten in place: item 0 is now another id
            for answer in (c.get("/item/0"), c.post("/label", data={"index": "0", "choice": "pass", "csrf": csrf})):
                assert answer.status_code == 409, answer.text
                shown = html.unescape(re.sub(r"<[^>]+>", "", answer.text))
                assert "changed since the page opened it" in shown and str(verdicts) in shown
            assert "changed since the page opened it" in c.get("/").text  # said on every page
    finally:
        server.stop()
    assert not demo_inputs.labels_out.exists() or journal_lines(demo_inputs.labels_out) == []


def test_a_torn_labels_file_repaired_at_start_is_said_on_the_page(demo_inputs):
    from tests.review.conftest import start

    demo_inputs.labels_out.write_bytes(b'{"rubricforge_labels":1,"id":"x","la')  # a kill mid-write
    server = start(demo_inputs)
    try:
        with client(server) as c:
            page = html.unescape(c.get("/").text)
    finally:
        server.stop()
    (side,) = demo_inputs.labels_out.parent.glob("labels.jsonl.torn-*")
    assert "its last line was torn" in page and str(side) in page
