"""Who may use the dashboard: a token off loopback, same-origin requests only, and safe headers.

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
* Browsers' cross-site requests are refused (``Sec-Fetch-Site`` other than
  ``same-origin``/``none``, or an ``Origin`` that is not this host), except
  a plain navigation to a page.  There are no CORS headers at all.
* Changes are ``POST`` with a JSON body (``Content-Type: application/json``,
  which a cross-site form cannot send without a preflight we never allow).
"""
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
    """Checks requests; ``token=None`` trusts callers whose peer address is in ``local`` (networks).

    Plain object; its methods only read it: safe from any greenlet or thread.
    """

    __slots__ = ("token", "local")

    def __init__(self, token=None, local=LOOPBACK):
        if token is not None and len(token) < 16:
            raise ValueError("a dashboard token is at least 16 characters")
        self.token = token
        self.local = tuple(ipaddress.ip_network(n, strict=False) for n in local)

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
        """None if the request may go on, else ``(status, message)``; ``page``: a navigation target."""
        fetch_site = environ.get("HTTP_SEC_FETCH_SITE")
        navigation = page and environ["REQUEST_METHOD"] == "GET" and environ.get("HTTP_SEC_FETCH_MODE") == "navigate"
        if fetch_site not in (None, "same-origin", "none") and not navigation:
            return "403 Forbidden", "cross-site requests are refused"
        origin = environ.get("HTTP_ORIGIN")
        if origin is not None and not navigation and not self._same_origin(origin, environ):
            return "403 Forbidden", "cross-origin requests are refused"
        if self.token is None:
            if not self.is_local(environ):
                return "403 Forbidden", "only local callers may use a dashboard without a token"
            host = _hostname(environ.get("HTTP_HOST", ""))
            if host is not None and not _loopback(host):
                return "403 Forbidden", "the Host header must name a loopback address (no token is set)"
            return None
        if not self.has_token(environ):
            return "401 Unauthorized", "this dashboard needs its token (Authorization: Bearer TOKEN)"
        return None

    def has_token(self, environ):
        token = self.token.encode()
        auth = environ.get("HTTP_AUTHORIZATION", "")
        if auth.startswith("Bearer ") and hmac.compare_digest(auth[7:].strip().encode(), token):
            return True
        cookie = environ.get("HTTP_COOKIE")
        if cookie:
            try:
                morsel = SimpleCookie(cookie).get(COOKIE)
            except Exception:  # a malformed Cookie header is no token
                morsel = None
            if morsel is not None and hmac.compare_digest(morsel.value.encode(), token):
                return True
        return False

    def query_token(self, given):
        """True if ``given`` (from ``?token=``) is the token."""
        return self.token is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def cookie(self, path):
        return ("Set-Cookie", "%s=%s; Path=%s; HttpOnly; SameSite=Strict" % (COOKIE, self.token, path or "/"))

    @staticmethod
    def _same_origin(origin, environ):
        parts = urlsplit(origin)
        scheme = environ.get("wsgi.url_scheme", "http")
        return parts.scheme == scheme and parts.netloc.lower() == environ.get("HTTP_HOST", "").lower()


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
