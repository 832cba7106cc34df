"""The dashboard in a real browser: headless Chromium (Debian's ``chromium`` + ``chromium-driver``) via Selenium.

The node is a real ``zactors up`` process; the test publishes and reads with
real clients.  Selenium blocks, so its calls run on the hub's threadpool and
the test's own actors keep running.  Screenshots go to the test's tmp dir.
"""
import re
import shutil

import gevent
import pytest

from zactors.patterns.clone.client import Clone
from zactors.patterns.harmony.node import Node
from zactors.patterns.majordomo.worker import Worker
from zactors.patterns.zeps import Publisher

from ..cli_helpers import read_until, start
from .helpers import request

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
if CHROMIUM is None or CHROMEDRIVER is None:
    pytest.skip("needs Debian's chromium and chromium-driver (.ci/run installs them)", allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import NoAlertPresentException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

XSS = "<img src=x onerror=alert(1)>"


def blocking(func, *args):
    return gevent.get_hub().threadpool.apply(func, args)


class Page:
    """A headless Chromium, every call on the threadpool."""

    def __init__(self, shots):
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1280,900"):
            options.add_argument(flag)
        service = webdriver.ChromeService(executable_path=CHROMEDRIVER)
        self.driver = blocking(lambda: webdriver.Chrome(options=options, service=service))
        self.shots = shots

    def open(self, url):
        blocking(self.driver.get, url)

    def script(self, code, *args):
        return blocking(self.driver.execute_script, code, *args)

    def find(self, css):
        return blocking(self.driver.find_elements, By.CSS_SELECTOR, css)

    def text(self, css):
        """The text of every element matching ``css``, read in one go (the page redraws between calls)."""
        return self.script("return Array.from(document.querySelectorAll(arguments[0]), e => e.innerText.trim())", css)

    def rows(self, css):
        """The cells' text of every table row matching ``css``, read in one go."""
        return self.script("return Array.from(document.querySelectorAll(arguments[0]), "
                           "r => Array.from(r.cells, c => c.innerText.trim()))", css)

    def wait(self, predicate, timeout=15, what="the page"):
        with gevent.Timeout(timeout, AssertionError("timed out after %ss waiting for %s" % (timeout, what))):
            while True:
                value = predicate()
                if value:
                    return value
                gevent.sleep(0.1)

    def shot(self, name):
        path = self.shots / ("%s.png" % name)
        blocking(self.driver.save_screenshot, str(path))
        return path

    def no_alert(self):
        try:
            blocking(lambda: self.driver.switch_to.alert.text)
        except NoAlertPresentException:
            return True
        return False

    def close(self):
        blocking(self.driver.quit)


def up(processes, tmp_path, *extra):
    proc = start(processes, "up", "--data", str(tmp_path / "data"), "--mdp", "tcp://127.0.0.1:*",
                 "--zeps", "tcp://127.0.0.1:*", "--clone-port", "0", "--web", "127.0.0.1:0", *extra)
    lines = read_until(proc.stdout, "up: Ctrl-C stops")
    where = dict(line.split(None, 1) for line in lines if line.strip() and not line.startswith("up:"))
    return proc, {k: v.strip() for k, v in where.items()}


@pytest.fixture
def node(processes, tmp_path):
    proc, where = up(processes, tmp_path)
    yield where
    proc.terminate()
    assert proc.wait(timeout=20) == 0


@pytest.fixture
def page(tmp_path):
    shots = tmp_path / "screenshots"
    shots.mkdir()
    browser = Page(shots)
    yield browser
    browser.close()


def zeps_endpoint(where):
    return where["zeps"].split()[0]


def clone_servers(where):
    return [tuple(where["clone"].split()[:3])]


def test_overview_loads_and_a_chart_moves_while_publishing(node, page):
    page.open(node["dashboard"])
    cards = tuple('.card[data-source=%s]' % name for name in ("majordomo", "zeps", "clone", "harmony", "supervisor"))
    page.wait(lambda: all(page.find(card) for card in cards), what="the four pattern cards and the supervision one")
    assert page.wait(lambda: page.text(".live") == ["live"], what="live updates")
    page.shot("overview-idle")

    def rate():
        values = page.text('.card[data-source=zeps] .chart[data-series="published/s"] .value')
        return float(values[0].rstrip("kM")) if values else 0.0

    def drawn():
        return page.script("return document.querySelector("
                           "'.card[data-source=zeps] .chart[data-series=\"published/s\"] polyline')"
                           "?.getAttribute('points') || ''")
    before = drawn()
    with Publisher(zeps_endpoint(node), "orders") as pub:
        def traffic():
            while True:
                for i in range(100):
                    pub.publish(b"order-%d" % i, b"{\"qty\": 1}")
                pub.flush()
                gevent.sleep(0.02)
        publisher = gevent.spawn(traffic)
        try:
            page.wait(lambda: rate() > 0, what="a published rate above 0")
            page.wait(lambda: drawn() != before, what="the chart redrawn")
            page.shot("overview-traffic")
        finally:
            publisher.kill()
    assert page.no_alert()


def test_a_click_into_a_zeps_stream_shows_its_live_tail(node, page):
    with Publisher(zeps_endpoint(node), "orders") as pub:
        pub.publish(b"warmup", b"1")
        pub.flush()
        page.open(node["dashboard"] + "#/zeps")
        link = page.wait(lambda: page.find('a[href="#/zeps/orders"]'), what="the stream's link")
        blocking(link[0].click)
        page.wait(lambda: page.find("#tail-box"), what="the tail")
        page.wait(lambda: "Following orders" in " ".join(page.text(".notice")), what="the tail following")

        def feed():
            i = 0
            while True:
                pub.publish(XSS.encode(), b"tail-%d" % i)
                pub.publish(b"bin", b"\x00\x01\xfe")
                pub.flush()
                i += 1
                gevent.sleep(0.1)
        feeder = gevent.spawn(feed)
        try:
            page.wait(lambda: any(t.startswith("tail-") for t in page.text("#tail td")), what="a message in the tail")
            page.wait(lambda: "000102" in " ".join(page.text("#tail td")) or "0001fe" in " ".join(page.text("#tail td")),
                      what="a binary body as hex")
            cells = page.text("#tail td")
            assert XSS in cells                                # the key shows as text...
            assert page.find("#tail img") == []               # ...and never became an element
            page.shot("zeps-tail")
            box = page.find("#tail-box input[name=key]")[0]   # now only the binary ones
            blocking(box.send_keys, "bin")
            blocking(page.find("#tail-box button[type=submit]")[0].click)
            page.wait(lambda: "(keys bin)" in " ".join(page.text(".notice")), what="the filter applied")

            def keys():
                return page.text("#tail td:nth-child(2)")
            page.wait(lambda: len(keys()) >= 3, what="filtered rows")
            assert set(keys()) == {"bin"}
        finally:
            feeder.kill()
        assert page.no_alert()


def test_a_clone_key_set_in_the_page_reaches_a_client_and_probes_stay_text(node, page):
    client = Clone(clone_servers(node), subtree=b"/app/")
    try:
        assert client.wait_synced(10)
        client.set(b"/app/" + XSS.encode(), XSS.encode(), wait=5)
        client.set(b"/app/lease", b"held", ttl=30, wait=5)
        page.open(node["dashboard"] + "#/clone/" + "%2Fapp%2F")
        page.wait(lambda: XSS in " ".join(page.text("table td")), what="the probe key listed")
        assert page.find("main img") == [] and page.no_alert()
        form = page.find("#clone-set input[name=key]")[0]
        blocking(form.clear)
        blocking(form.send_keys, "/app/from-the-page")
        blocking(page.find("#clone-set input[name=value]")[0].send_keys, "hello <b>browser</b>")
        blocking(page.find("#clone-set button")[0].click)
        page.wait(lambda: client.get(b"/app/from-the-page") == b"hello <b>browser</b>", what="the set at the client")
        page.wait(lambda: "hello <b>browser</b>" in " ".join(page.text("table td")), what="the new key listed")
        def ttl_cells():  # key -> the ttl column's text, once both rows are listed
            found = {r[0]: r[2] for r in page.rows("table tbody tr") if r and r[0] in ("/app/lease", "/app/from-the-page")}
            return found if len(found) == 2 else None
        ttls = page.wait(ttl_cells, what="the ttl column")
        assert re.fullmatch(r"\d+ s", ttls["/app/lease"]) and 0 < int(ttls["/app/lease"].split()[0]) <= 30, ttls
        assert ttls["/app/from-the-page"] == "\u2014"
        first = int(ttls["/app/lease"].split()[0])  # and it counts down on the page, without a reload
        page.wait(lambda: (now := ttl_cells()) and re.fullmatch(r"\d+ s", now["/app/lease"])
                  and int(now["/app/lease"].split()[0]) < first, timeout=10, what="the ttl counting down")
        page.shot("clone")
        assert page.find("main b") == [] or all(t != "browser" for t in page.text("main b"))
        assert page.no_alert()
    finally:
        client.destroy()


class Echo(Worker):
    service = b"echo"

    def handle(self, request):
        return request


def test_harmony_and_majordomo_pages_show_peers_and_services(node, page):
    worker = Echo(node["majordomo"])
    peer = Node("visitor", {"X-Role": XSS}, beacon=False, host="127.0.0.1",
                endpoints=[node["harmony"].split()[0]]).start()
    try:
        peer.join("ops")
        page.open(node["dashboard"] + "#/majordomo")
        page.wait(lambda: "echo" in page.text("table td"), what="the echo service")
        assert "[object" not in blocking(lambda: page.driver.page_source)
        page.shot("majordomo")
        page.open(node["dashboard"] + "#/harmony")
        page.wait(lambda: "visitor" in page.text("table td"), what="the peer")
        page.wait(lambda: "ops" in page.text("table td .pill"), what="its group")
        assert any(XSS in t for t in page.text("table td")) and page.find("main img") == []
        page.shot("harmony")
        assert page.no_alert()
    finally:
        peer.stop()
        worker.destroy()


def test_the_supervision_page_shows_every_part_and_the_dashboard_own_restart(node, page):
    url = node["dashboard"]
    page.open(url + "#/supervisor")
    page.wait(lambda: {"majordomo", "zeps", "clone", "harmony", "dashboard"} <= set(page.text("table td")),
              what="every part, the dashboard too")
    status, _, body = request(url + "api/supervisor/kill", "POST", {"part": "dashboard"})
    assert status == 200, body
    # the page reconnects to the restarted dashboard (same URL) and shows its restart and death
    page.wait(lambda: "Crash: killed from the dashboard" in page.text("table td span"), timeout=20,
              what="the dashboard's last death")
    row = [r for r in page.rows("table tr") if r and r[0] == "dashboard"][0]
    assert row[1] == "running" and row[2] == "1", row
    page.shot("supervision")
    assert page.no_alert()


def test_a_non_loopback_dashboard_refuses_requests_without_its_token(processes, tmp_path, page):
    # 127.0.0.2 is not 127.0.0.1/::1/localhost: the dashboard treats it as off-loopback (documented)
    proc = start(processes, "up", "--data", str(tmp_path / "data"), "--no-mdp", "--no-zeps", "--no-clone",
                 "--web", "127.0.0.2:0")
    lines = read_until(proc.stdout, "up: Ctrl-C stops")
    url = [line.split()[1] for line in lines if line.startswith("dashboard")][0]
    assert "?token=" in url
    bare = url.split("?")[0]
    try:
        assert request(bare + "api/status")[0] == 401
        assert request(bare + "api/harmony")[0] == 401
        page.open(bare)
        assert "needs its token" in blocking(lambda: page.driver.page_source)
        page.open(url)  # the printed link: sets the cookie, then the page works
        page.wait(lambda: page.find(".card[data-source=harmony]"), what="the page with the token")
        page.shot("with-token")
    finally:
        proc.terminate()
        assert proc.wait(timeout=20) == 0
