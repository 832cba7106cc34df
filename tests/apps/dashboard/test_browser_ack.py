"""In a real browser: the ZEPS page names the broker's acknowledgement level and what it survives, and a
stream's page its journal lag (issue #19: the level named the same everywhere)."""
import pytest

from zactors.patterns.zeps import Publisher

from .test_browser import blocking, page, up, zeps_endpoint  # noqa: F401  (page: a fixture)

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


def test_the_zeps_page_names_the_ack_level(processes, tmp_path, page):  # noqa: F811
    proc, where = up(processes, tmp_path, "--ack", "synced")
    try:
        with Publisher(zeps_endpoint(where), "orders") as pub:
            pub.publish(b"k", b"1")
            pub.flush()
        page.open(where["dashboard"] + "#/zeps")
        page.wait(lambda: "an fsync covered it (survives a power loss)." in " ".join(page.text("p")),
                  what="the ack level's line")
        tiles = page.text(".tile")
        assert any(t.split() == ["synced", "ack"] for t in tiles), tiles
        link = page.wait(lambda: page.find('a[href="#/zeps/orders"]'), what="the stream's link")
        blocking(link[0].click)
        page.wait(lambda: any(t.split()[-1:] == ["unwritten"] for t in page.text(".tile")), what="the lag tiles")
        assert page.no_alert()
    finally:
        proc.terminate()
        assert proc.wait(timeout=20) == 0
