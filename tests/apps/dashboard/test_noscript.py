"""Without JavaScript the dashboard says it needs JavaScript, and where else to read the state."""
import html.parser

import pytest
from gevent.pywsgi import WSGIServer

from zactors.apps.dashboard import Dashboard

from .helpers import request

pytestmark = pytest.mark.timeout(30)


class _Text(html.parser.HTMLParser):
    """The text a browser without scripting shows: <noscript> content is text there; <script> is not run."""

    def __init__(self):
        super().__init__()
        self.noscript = []
        self._depth = 0

    def handle_starttag(self, tag, attrs):
        self._depth += tag == "noscript"

    def handle_endtag(self, tag):
        self._depth -= tag == "noscript"

    def handle_data(self, data):
        if self._depth:
            self.noscript.append(data)


def test_the_page_without_javascript_says_it_needs_javascript():
    dashboard = Dashboard([])
    server = WSGIServer(("127.0.0.1", 0), dashboard, log=None)
    server.start()
    try:
        status, _, page = request("http://127.0.0.1:%d/" % server.address[1])
        css = request("http://127.0.0.1:%d/static/style.css" % server.address[1])[2]
    finally:
        server.stop()
        dashboard.close()
    assert status == 200
    parser = _Text()
    parser.feed(page.decode())
    text = " ".join("".join(parser.noscript).split())
    assert "needs JavaScript" in text and "zactors status" in text
    assert b"@media (scripting: none)" in css   # the "Loading..." line is hidden then
