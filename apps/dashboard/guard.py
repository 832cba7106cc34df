"""Who may use the dashboard, and as whom: a token off loopback, per-key tokens, same-origin requests only.

Rules (:meth:`Guard.check`):

* With a ``token`` (required whenever the dashboard listens anywhere but
  127.0.0.1, ::1 or localhost) every request carries it: ``Authorization:
  Bearer TOKEN``, the ``zactors_token`` cookie, or, to open the page from
  the printed link, ``?token=TOKEN`` (answered by a redirect that sets the
  cookie, ``HttpOnly; SameSite=Strict``).
* Without one, only a *local* caller may use it: the peer address of the
  connection (the server's ``REMOTE_ADDR``, never a header) is in ``local``
  (by default the loopback addresses, 127.0.0.0/8 and ::1), the request came
  through no proxy (no ``Forwarded``, ``X-Forwarded-For`` or ``X-Real-IP``
  header: behind a proxy every caller looks local, so set a token there),
  and the ``Host`` header names a loopback host, which keeps DNS-rebinding
  pages out.  The Host header alone decides nothing.
* A *per-key token* (``keys``: token -> a client's z85 public key) stands
  for that client key, wherever the caller is: the request sees only what
  the key's permissions allow (the ZEPS streams it may use, as a QUERY with
  that key shows them; nothing of the other patterns, whose permissions
  grant keys nothing).  Every other accepted request is the *operator's*
  (the dashboard token, or a local caller without one) and sees everything.
* Browsers' cross-site requests are refused (``Sec-Fetch-Site`` other than
  ``same-origin``/``none``, or an ``Origin`` that is not this host), except
  a plain navigation to a page.  There are no CORS headers at all.
* Changes are ``POST`` with a JSON body (``Content-Type: application/json``,
  which a cross-site form cannot send without a preflight we never allow).
"""
import hashlib
import hmac
import ipaddress
from http.cookies import SimpleCookie
from urllib.parse import urlsplit

__all__ = ["Guard", "is_loopback_bind", "HEADERS", "LOOPBACK"]

COOKIE = "zactors_token"
LOOPBACK_NAMES = ("127.0.0.1", "::1", "localhost")
#: the peer addresses trusted without a token, by default
LOOPBACK = ("127.0.0.0/8", "::1/128")
_PROXY_HEADERS = ("HTTP_FORWARDED", "HTTP_X_FORWARDED_FOR", "HTTP_X_REAL_IP")

#: sent with every response
HEADERS = [
    ("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
]


def is_loopback_bind(host):
    """True for the hosts that need no token: 127.0.0.1, ::1 and localhost (not the rest of 127/8)."""
    return host in LOOPBACK_NAMES


class Guard:
    """Checks requests; ``token=None`` trusts callers whose peer address is in ``local`` (networks);
    ``keys``: ``{token: client public key (z85)}``, the per-key tokens.

    Plain object; its methods only read it: safe from any greenlet or thread.
    """

    __slots__ = ("token", "local", "_keys")

    def __init__(self, token=None, local=LOOPBACK, keys=None):
        if token is not None and len(token) < 16:
            raise ValueError("a dashboard token is at least 16 characters")
        self.token = token
        self.local = tuple(ipaddress.ip_network(n, strict=False) for n in local)
        self._keys = {}  # sha256 of a per-key token -> the key (a dict lookup by digest leaks no timing)
        for given, key in (keys or {}).items():
            if len(given) < 16 or given == token:
                raise ValueError("a per-key token is at least 16 characters and not the dashboard token")
            self._keys[_digest(given)] = key.decode("ascii") if isinstance(key, bytes) else key

    def is_local(self, environ):
        """True if the connection's peer address (``REMOTE_ADDR``) is local and no proxy is in between."""
        if any(environ.get(h) for h in _PROXY_HEADERS):
            return False
        try:
            address = ipaddress.ip_address(environ.get("REMOTE_ADDR", "").split("%", 1)[0])
        except ValueError:      # absent, or not an IP address (a Unix socket): not known to be local
            return False
        if address.version == 6 and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.local)

    def check(self, environ, page):
        """``(refused, viewer)``: ``refused`` None if the request may go on, else ``(status, message)``;
        ``viewer`` None for the operator, else the key a per-key token stands for.  ``page``: a navigation
        target."""
        fetch_site = environ.get("HTTP_SEC_FETCH_SITE")
        navigation = page and environ["REQUEST_METHOD"] == "GET" and environ.get("HTTP_SEC_FETCH_MODE") == "navigate"
        if fetch_site not in (None, "same-origin", "none") and not navigation:
            return ("403 Forbidden", "cross-site requests are refused"), None
        origin = environ.get("HTTP_ORIGIN")
        if origin is not None and not navigation and not self._same_origin(origin, environ):
            return ("403 Forbidden", "cross-origin requests are refused"), None
        presented = _presented(environ)
        if presented is not None and self._keys:
            key = self._keys.get(_digest(presented))
            if key is not None:
                return None, key
        if self.token is None:
            if not self.is_local(environ):
                return ("403 Forbidden", "only local callers may use a dashboard without a token"), None
            host = _hostname(environ.get("HTTP_HOST", ""))
            if host is not None and not _loopback(host):
                return ("403 Forbidden", "the Host header must name a loopback address (no token is set)"), None
            return None, None
        if presented is None or not hmac.compare_digest(presented.encode(), self.token.encode()):
            return ("401 Unauthorized", "this dashboard needs its token (Authorization: Bearer TOKEN)"), None
        return None, None

    @property
    def has_tokens(self):
        """True if some token opens this dashboard (its own or a per-key one)."""
        return self.token is not None or bool(self._keys)

    def query_token(self, given):
        """True if ``given`` (from ``?token=``) is the dashboard's token or a per-key token."""
        if self.token is not None and hmac.compare_digest(given.encode(), self.token.encode()):
            return True
        return _digest(given) in self._keys

    @staticmethod
    def cookie(path, token):
        return ("Set-Cookie", "%s=%s; Path=%s; HttpOnly; SameSite=Strict" % (COOKIE, token, path or "/"))

    @staticmethod
    def _same_origin(origin, environ):
        parts = urlsplit(origin)
        scheme = environ.get("wsgi.url_scheme", "http")
        return parts.scheme == scheme and parts.netloc.lower() == environ.get("HTTP_HOST", "").lower()


def _digest(token):
    return hashlib.sha256(token.encode()).digest()


def _presented(environ):
    """The token a request carries (``Authorization: Bearer``, else the cookie), or None."""
    auth = environ.get("HTTP_AUTHORIZATION", "")
    if auth.startswith("Bearer "):
        return auth[7:].strip()
    cookie = environ.get("HTTP_COOKIE")
    if cookie:
        try:
            morsel = SimpleCookie(cookie).get(COOKIE)
        except Exception:  # a malformed Cookie header is no token
            morsel = None
        if morsel is not None:
            return morsel.value
    return None


def _hostname(host_header):
    """The host of a Host header (brackets off IPv6); None if absent."""
    if not host_header:
        return None
    if host_header.startswith("["):
        return host_header[1:host_header.find("]")] if "]" in host_header else host_header
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


def _loopback(host):
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
