"""One access rule everywhere (issue 20): a per-key dashboard token sees what the key's ZEPS permissions allow.

The dashboard API and ``/metrics`` showed every stream, its subscribers' patterns and the journal path to
anyone who could call them; a QUERY with the same key showed only the streams the key may use.
"""
import json

import pytest
from gevent.pywsgi import WSGIServer

from zactors.actors.auth import Authenticator, generate_keypair
from zactors.apps.dashboard import Dashboard, sources
from zactors.patterns.zeps import Subscriber
from zactors.patterns.zeps.permissions import Permissions

from ...conftest import wait_for
from .helpers import EventStream, get_json, request

pytestmark = pytest.mark.timeout(60)

OPERATOR = "operator-token-0123456789"
PUBLIC = "public-key-token-0123456789"


@pytest.fixture
def dashboard(tmp_path):
    """A CURVE ZEPS broker with public.* and secret.* streams (a subscriber on the secret one) and a Majordomo
    broker, behind a dashboard with an operator token and a per-key token for a key granted public.* only."""
    pytest.importorskip("zactors.actors.journal")
    from zactors.patterns.majordomo.broker import Broker as MajordomoBroker
    from zactors.patterns.zeps.broker import Broker
    server, public, admin = (generate_keypair() for _ in range(3))
    perms = Permissions([(public.public, "publish,subscribe", "public.*"), (admin.public, "publish,subscribe", "*")])
    made = [Authenticator(curve="*")]
    journal = str(tmp_path / "journal")
    zeps = Broker(journal, curve=server, permissions=perms, streams=["public.news", "secret.plans"])
    made.append(zeps)
    made.append(Subscriber(zeps.endpoint, "secret.plans", b"re:launch-codes", curve=(server.public, admin)))
    wait_for(lambda: zeps.call("INFO")["streams"]["secret.plans"]["subscribers"], what="the secret subscriber")
    mdp = MajordomoBroker("tcp://127.0.0.1:*")
    made.append(mdp)
    dash = Dashboard([sources.Zeps(zeps), sources.Majordomo(mdp)], token=OPERATOR, keys={PUBLIC: public.public},
                     interval=0.2)
    http = WSGIServer(("127.0.0.1", 0), dash, log=None)
    http.start()
    try:
        url = "http://127.0.0.1:%d/" % http.address[1]
        wait_for(lambda: "secret.plans" in json.dumps(get_json(url + "api/status", headers=_auth(OPERATOR))),
                 what="a sample with both streams")
        yield url, journal
    finally:
        http.stop()
        dash.close()
        for thing in reversed(made):
            thing.destroy()


def _auth(token):
    return {"Authorization": "Bearer " + token}


def _hidden(text, journal):
    return "secret" not in text and "launch-codes" not in text and journal not in text


def test_a_per_key_token_sees_only_the_streams_the_key_may_use(dashboard):
    url, journal = dashboard
    status = get_json(url + "api/status", headers=_auth(PUBLIC))
    assert list(status["sources"]) == ["zeps"]                  # Majordomo grants keys nothing
    assert list(status["sources"]["zeps"]["data"]["streams"]) == ["public.news"]
    assert _hidden(json.dumps(status), journal)
    part = get_json(url + "api/zeps", headers=_auth(PUBLIC))
    assert list(part["data"]["streams"]) == ["public.news"] and _hidden(json.dumps(part), journal)
    assert request(url + "api/majordomo", headers=_auth(PUBLIC))[0] == 404
    history = get_json(url + "api/history", headers=_auth(PUBLIC))
    assert list(history["series"]) == ["zeps"]
    code, _, body = request(url + "metrics", headers=_auth(PUBLIC))
    assert code == 200 and 'stream="public.news"' in body.decode()
    assert _hidden(body.decode(), journal) and "majordomo" not in body.decode()
    code, _, body = request(url + "api/zeps/tail?stream=secret.plans", headers=_auth(PUBLIC))
    assert code == 403, body                                    # refused before the broker is asked
    host, port = url[7:-1].split(":")
    events = EventStream(host, int(port), "/api/events", "Authorization: Bearer %s\r\n" % PUBLIC)
    try:
        assert events.status == 200
        for _ in range(2):                                      # the first snapshot and one from a tick
            name, data = events.next_event()
            assert name == "snapshot" and _hidden(data, journal) and '"public.news"' in data
    finally:
        events.close()


def test_the_operator_still_sees_everything(dashboard):
    url, journal = dashboard
    status = get_json(url + "api/status", headers=_auth(OPERATOR))
    assert sorted(status["sources"]) == ["majordomo", "zeps"]
    data = status["sources"]["zeps"]["data"]
    assert sorted(data["streams"]) == ["public.news", "secret.plans"] and data["journal"] == journal
    assert 'stream="secret.plans"' in request(url + "metrics", headers=_auth(OPERATOR))[2].decode()
    assert request(url + "api/status", headers=_auth("not-a-token-at-all-0123"))[0] == 401


def test_a_per_key_token_opens_the_page_with_its_own_cookie(dashboard):
    url, journal = dashboard
    code, headers, _ = request(url + "?token=" + PUBLIC)
    assert code == 303
    cookie = headers["Set-Cookie"].split(";", 1)[0]
    assert cookie == "zactors_token=" + PUBLIC
    status = get_json(url + "api/status", headers={"Cookie": cookie})
    assert list(status["sources"]) == ["zeps"] and _hidden(json.dumps(status), journal)
