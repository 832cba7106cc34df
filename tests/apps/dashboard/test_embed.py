"""The Flask example of docs/operations.md runs as written (on an ephemeral port), and the dashboard works mounted under a prefix."""
import json
import pathlib
import re

import pytest

from .helpers import get_json, request

pytestmark = pytest.mark.timeout(30)

PAGE = pathlib.Path(__file__).resolve().parents[3] / "docs" / "operations.md"


def test_readme_flask_example_mounts_the_dashboard():
    pytest.importorskip("flask")
    blocks = [b for b in re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S) if "DispatcherMiddleware" in b]
    assert blocks, "docs/operations.md lost its Flask example"
    code = blocks[0]
    assert '("127.0.0.1", 8000)' in code and "server.serve_forever()" in code
    code = code.replace('("127.0.0.1", 8000)', '("127.0.0.1", 0)').replace("server.serve_forever()", "server.start()")
    namespace = {"__name__": "__main__"}
    exec(compile(code, "docs/operations.md", "exec"), namespace)
    server, dashboard, broker = namespace["server"], namespace["dashboard"], namespace["broker"]
    try:
        root = "http://127.0.0.1:%d" % server.address[1]
        status, _, body = request(root + "/")
        assert status == 200 and b"/zactors/" in body          # the app's own route
        status, headers, _ = request(root + "/zactors")
        assert status == 308 and headers["Location"] == "/zactors/"
        status, headers, page = request(root + "/zactors/")
        assert status == 200 and b'src="static/app.js"' in page  # relative: works under any prefix
        assert request(root + "/zactors/static/app.js")[0] == 200
        snapshot = get_json(root + "/zactors/api/status")
        assert snapshot["sources"]["majordomo"]["status"] == "ok"
        assert json.loads(request(root + "/zactors/api/nothing")[2])["error"]
    finally:
        server.stop()
        dashboard.close()
        broker.destroy()
