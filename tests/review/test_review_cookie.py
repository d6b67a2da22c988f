"""The token cookie on a shared host, over HTTP: what another server on 127.0.0.1 can and cannot do with it.

A browser keeps one cookie jar per host name and sends a host's cookies to every port of it (RFC 6265 §8.5:
cookies do not isolate by port). httpx's cookie jar (Python's `http.cookiejar`) does the same, so an httpx
client stands in for the browser: it opens one page's URL, then visits other ports of 127.0.0.1."""

from __future__ import annotations

import dataclasses
import threading
from contextlib import contextmanager
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from rubricforge_dspy.review.security import COOKIE
from tests.review.conftest import start


@contextmanager
def two_pages(demo_inputs, tmp_path):
    """Two review pages at once on two ports of 127.0.0.1 (each with its own labels file)."""
    a = start(demo_inputs)
    try:
        b = start(dataclasses.replace(demo_inputs, labels_out=tmp_path / "other-labels.jsonl"))
        try:
            yield a, b
        finally:
            b.stop()
    finally:
        a.stop()


def base(server) -> str:
    return f"http://127.0.0.1:{server.port}"


def test_the_cookie_of_one_page_does_not_open_another_page_on_another_port(demo_inputs, tmp_path):
    with two_pages(demo_inputs, tmp_path) as (a, b), httpx.Client(follow_redirects=False, timeout=30) as browser:
        assert browser.get(a.url).status_code == 303  # sets a's cookie, named after a's port
        assert [c.name for c in browser.cookies.jar] == [f"{COOKIE}_{a.port}"]
        assert browser.get(base(a) + "/").status_code == 200
        assert browser.get(base(b) + "/").status_code == 403  # a's cookie is sent to b, and opens nothing there
        stolen = {f"{COOKIE}_{b.port}": a.token}  # a's token under b's cookie name: still another run's token
        assert httpx.get(base(b) + "/", cookies=stolen, timeout=30).status_code == 403
        assert httpx.post(base(b) + "/label", cookies=stolen, timeout=30,
                          data={"index": "0", "choice": "pass", "csrf": a.app.state.guard.csrf}).status_code == 403

        assert browser.get(b.url).status_code == 303  # b's own URL: b's cookie, beside a's (names differ)
        assert sorted(c.name for c in browser.cookies.jar) == sorted([f"{COOKIE}_{a.port}", f"{COOKIE}_{b.port}"])
        assert browser.get(base(a) + "/").status_code == 200  # both pages stay open in one browser
        assert browser.get(base(b) + "/").status_code == 200
    assert not (tmp_path / "other-labels.jsonl").read_text().strip()  # b took no label


class _Recorder(BaseHTTPRequestHandler):
    seen: list[str] = []

    def do_GET(self):  # noqa: N802 - http.server's name
        type(self).seen.append(self.headers.get("Cookie") or "")
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):  # quiet
        pass


def test_a_server_on_another_port_of_the_host_is_sent_the_token_cookie_and_can_use_it(demo_server):
    """What a same-host attacker CAN do: a server another local user or process runs on 127.0.0.1 receives the
    token cookie when the person's browser visits it while the page runs, and with it reads the page."""
    other = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    _Recorder.seen = []
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        with httpx.Client(follow_redirects=False, timeout=30) as browser:
            assert browser.get(demo_server.url).status_code == 303
            browser.get(f"http://127.0.0.1:{other.server_address[1]}/")  # the person visits another local page
    finally:
        other.shutdown()
        other.server_close()
    received = SimpleCookie(_Recorder.seen[0])
    name = f"{COOKIE}_{demo_server.port}"
    assert received[name].value == demo_server.token  # the token, and the page's port in the cookie's name
    with httpx.Client(base_url=base(demo_server), timeout=30) as attacker:
        assert attacker.get("/", cookies={name: received[name].value}).status_code == 200
