"""Secrets out of URLs and DSNs before they are shown: passwords, API keys, tokens.

A URL is not cut with ``urllib.parse``: it stops the authority at ``#`` or ``?``, which libpq
and HTTP clients accept inside a password, and then shows the rest of the password in clear.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import unquote

__all__ = ["RedactURLs", "install_log_redaction", "redact_url", "scrub_credentials", "url_secrets"]

_KEYS = (r"password|passwd|pwd|pass|api[_-]?key|apikey|key|token|access[_-]?token|secret"
         r"|client[_-]?secret|sig|signature|auth|authorization")
_QUERY_SECRET = re.compile(rf"([?&;](?:{_KEYS})=)([^&]*)", re.IGNORECASE)
_DELIMITERS = re.compile(r"[#?/@:&;=]")
_HOST_PORT = re.compile(r"[^:@?#]*:\d*")
_QUERY_START = re.compile(r"\?[A-Za-z_][\w.-]*=")
# what follows a userinfo's "@" up to a later "@" when that later "@" is in the query:
# "host[:port]/path?name=..." with a plain host and path
_QUERY_AT = re.compile(r"(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::\d+)?(?:/[\w.,~%-]*)?"
                       r"\?[A-Za-z_][\w.-]*=[^#/@]*")
_KV_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def _split(url: str) -> tuple[str, str, str] | None:
    """``(scheme://, userinfo, after-@)`` of a URL with credentials, else None.

    The authority ends at the first ``/`` (libpq's rule), and within it the credentials at
    the last ``@``; a password holding a ``/`` (or an ``@`` then a ``/``) is found by the last
    ``@`` of the URL, unless that ``@`` is plainly in a query (``h:5432/db?user=a@b.org``).
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return None
    head = rest.split("/", 1)[0]
    at = head.rfind("@")
    last = rest.rfind("@")
    if 0 <= at < last and not (_QUERY_AT.fullmatch(rest[at + 1 : last])
                               and not re.search(r"[/:]", rest[last + 1 :])):
        # "user:p@ss/w0rd@host:5432/db": an "@" after the first "/" is a password's "@"
        # unless it sits in the query of a plain "host[:port]/path" and no "host:port/path"
        # follows it ("h:5432/db?user=a@b.org"); ambiguous URLs hide more, never less
        at = last
    if at < 0:
        at = rest.rfind("@")
        before = rest[:at]
        first = before.split("/", 1)[0]
        # an "@" in the query of a host:port URL ("host:5432/db?user=a@b") ends no password
        if at < 0 or ":" not in first or (_HOST_PORT.fullmatch(first)
                                          and _QUERY_START.search(before)):
            return None
    return scheme + sep, rest[:at], rest[at + 1 :]


def redact_url(url: str) -> str:
    """``url`` with its password and secret query values (``password``, ``api_key``,
    ``token``...) replaced by ``***``; a ``key=value`` DSN with ``password=***``."""
    if "://" not in url:
        return _KV_PASSWORD.sub(r"\1***", url)
    parts = _split(url)
    if parts is not None:
        prefix, userinfo, rest = parts
        user = userinfo.split(":", 1)[0] + ":***" if ":" in userinfo else userinfo
        url = f"{prefix}{user}@{rest}"
    return _QUERY_SECRET.sub(r"\1***", url)


def url_secrets(url: str) -> list[str]:
    """The secrets ``redact_url`` hides, as written and percent-decoded, and their pieces
    between URL delimiters, longest first (to scrub them from messages that quote them)."""
    found: list[str] = []
    if "://" not in url:
        found += [m.group(2).strip("'") for m in _KV_PASSWORD.finditer(url)]
    else:
        parts = _split(url)
        if parts is not None and ":" in parts[1]:
            found.append(parts[1].split(":", 1)[1])
        found += [m.group(2) for m in _QUERY_SECRET.finditer(url)]
    out = {s for raw in found for s in (raw, unquote(raw)) if s}
    # a parser that cut the URL at a delimiter inside the secret quotes only a piece of it
    out |= {piece for s in list(out) for piece in _DELIMITERS.split(s) if len(piece) >= 3}
    return sorted(out, key=len, reverse=True)


_AUTH = re.compile(r"\b(Basic|Bearer|Token)(\s+)[A-Za-z0-9+/=._~-]{6,}", re.IGNORECASE)
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>]+")


def scrub_credentials(text: str) -> str:
    """``text`` with every URL's secrets masked (``redact_url``) and the credentials of an
    ``Authorization`` value ("Basic dXNlcjpwdw==", "Bearer ...") replaced by ``***``: what a
    server's error body or a client's log line may echo."""
    text = _URL.sub(lambda m: redact_url(m.group()), text)
    return _AUTH.sub(r"\1\2***", text)


class RedactURLs(logging.Filter):
    """A logging filter masking secrets in a record's message and arguments
    (``scrub_credentials``): installed on the HTTP client's loggers, which log each request's
    URL, password and ``api_key=`` included, at INFO."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = scrub_credentials(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(
                a if isinstance(a, (int, float)) else scrub_credentials(str(a))
                for a in record.args
            )
        return True


def install_log_redaction(*names: str) -> None:
    """Add ``RedactURLs`` to these loggers (once each)."""
    for name in names:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactURLs) for f in logger.filters):
            logger.addFilter(RedactURLs())
