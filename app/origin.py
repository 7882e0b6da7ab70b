"""Open mode's guard against web pages: a gate of the front door (app/front.py), set only
when no API keys are configured.

Without keys anyone who can reach the service may call it, and so may any web page the
user of this machine opens: a browser sends a page's requests with no key to show, and
two kinds of them reach a service on 127.0.0.1 unasked.

- A cross-site request: a form on another site POSTs (a "simple" request, no preflight)
  to, say, ``…/dlq/{msg_id}/redrive``, which has no body to refuse. Every browser says
  where such a request comes from (``Origin``, ``Sec-Fetch-Site``): a state-changing
  request from another origin is 403. A state-changing request whose body a browser form
  could have made (a Content-Type that is not JSON) is 415, as any request body that is
  not JSON is (api.md, Conventions). curl, the CLI and the generated clients send no
  Origin and JSON (or no Content-Type at all), and pass.
- DNS rebinding: a page's own name is made to resolve to 127.0.0.1, so its requests are
  same-origin for the browser and carry that name as ``Host``. A request whose Host is
  neither an IP address, ``localhost`` (or a name under it), ``ROCKTIMER_HOST``, nor a
  name of ``ROCKTIMER_SERVED_HOSTS`` is 421. An IP address cannot be rebound, and nor
  can the port say anything a name does not (a published port may differ from the one
  bound), so only the name is checked.

With keys, a page has none to send: these requests are refused as unauthorised anyway.
"""

from __future__ import annotations

import ipaddress

from starlette.types import Scope

from app.errors import Forbidden, Misdirected, UnsupportedMediaType
from app.intake import json_media

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
JSON = b"application/json"  # what nearly every request says: no parse for it
REFUSED_SITES = frozenset({b"cross-site", b"same-site"})  # Sec-Fetch-Site: not same-origin


def host_name(host: str) -> str:
    """The name of a Host header's value, without its port or an IPv6 address's brackets."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    name, colon, port = host.rpartition(":")
    name = name if colon and port.isdigit() else host
    return name[:-1] if name.endswith(".") else name  # "localhost." is localhost


def served_names(host: str, extra: str) -> frozenset[str]:
    """``ROCKTIMER_HOST`` and ``ROCKTIMER_SERVED_HOSTS`` (comma-separated), as names."""
    names = {host_name(n) for n in extra.split(",") if n.strip()}
    return frozenset({"localhost", host_name(host), *names})


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class BrowserGuard:
    def __init__(self, names: frozenset[str]) -> None:
        self.names = names
        self._known: set[bytes] = set()  # Host values seen and served: a set lookup next time

    def _host_served(self, host: bytes) -> bool:
        if host in self._known:
            return True
        name = host_name(host.decode("latin-1"))
        served = name in self.names or name.endswith(".localhost") or _is_ip(name)
        if served and len(self._known) < 64:
            self._known.add(host)
        return served

    def check(self, scope: Scope) -> None:
        """Raise Misdirected (421), Forbidden (403) or UnsupportedMediaType (415) for a
        request a web page may have made behind the user's back."""
        headers = dict(scope["headers"])  # in C: a few times cheaper than a loop over them
        host = headers.get(b"host")
        if host is not None and not self._host_served(host):
            shown = host.decode("latin-1")
            raise Misdirected(
                f"Host {shown!r} is not a name of this service: without API keys it answers "
                "to IP addresses, localhost and ROCKTIMER_HOST only (name others in "
                "ROCKTIMER_SERVED_HOSTS, or set ROCKTIMER_API_KEYS)"
            )
        if scope["method"] in SAFE_METHODS:
            return
        origin = headers.get(b"origin")
        site = headers.get(b"sec-fetch-site")
        media = headers.get(b"content-type")
        if origin is not None and (host is None or not _same_origin(origin, host)):
            raise _cross_site(f"Origin {origin.decode('latin-1')!r}")
        if site is not None and site.lower() in REFUSED_SITES:
            raise _cross_site(f"Sec-Fetch-Site {site.decode('latin-1')!r}")
        if media is not None and media != JSON and not json_media(media.decode("latin-1")):
            declared = media.decode("latin-1").split(";", 1)[0].strip()
            raise UnsupportedMediaType(
                f"send the body as application/json, not {declared!r}, or no Content-Type "
                "when there is no body"
            )


def _same_origin(origin: bytes, host: bytes) -> bool:
    """An Origin (``scheme://host[:port]``, "null" for an opaque one) names the Host asked."""
    _, sep, authority = origin.partition(b"://")
    return bool(sep) and authority.lower() == host.strip().lower()


def _cross_site(what: str) -> Forbidden:
    return Forbidden(
        f"a request from another site ({what}) may not change anything while the service "
        "runs without API keys"
    )
