"""Plain words: what a setting's text may say, read into its value (the parsers
:mod:`plant_store.config` declares each setting with; a ValueError says what is wrong, and
the config names the setting and where its value came from), and the counted nouns the
commands print."""

import base64
import binascii
import re
from collections.abc import Callable
from urllib.parse import SplitResult, urlsplit


def counted(n: int, one: str, many: str = "") -> str:
    """``1 plant``, ``2 plants``, ``0 webhook deliveries``."""
    return f"{n} {one if n == 1 else many or one + 's'}"


INTEGER = re.compile(r"-?[0-9]+")  # ASCII digits only: no '+80', '1_000' or Arabic digits


def integer_in(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text) if INTEGER.fullmatch(text.strip()) else None
        if value is None or not low <= value <= high:
            raise ValueError(f"must be an integer from {low} to {high}")
        return value

    return parse


def number_in(low: float, high: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:  # also refuses nan
            raise ValueError(f"must be a number from {low:g} to {high:g}")
        return value

    return parse


def _port(parts: SplitResult) -> int | None:
    """A URL's port, None when it names none, -1 when what it names is not a port."""
    try:
        return parts.port  # parsed on access: ValueError when not a number, or too big
    except ValueError:
        return -1


def http_urls(text: str) -> tuple[str, ...]:
    urls = tuple(text.replace(",", " ").split())
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or (
                _port(parts) in (0, -1)):
            raise ValueError(f"{url!r} is not an http:// or https:// URL with a valid port")
    return urls


class OneOf:
    """One of a few words (shown by --help)."""

    def __init__(self, *choices: str) -> None:
        self.choices = choices

    def __call__(self, text: str) -> str:
        value = text.strip().lower()
        if value not in self.choices:
            raise ValueError(f"must be one of {', '.join(self.choices)}")
        return value


class Flag:
    """true or false, and the words that say so."""

    choices = ("true", "false")

    def __call__(self, text: str) -> bool:
        value = text.strip().lower()
        if value in ("1", "true", "yes", "on"):
            return True
        if value in ("0", "false", "no", "off"):
            return False
        raise ValueError("must be true or false")


FLAG = Flag()


def webhook_secret(text: str) -> str:
    """A Standard Webhooks secret: whsec_ and the base64 (padded or not) of 24 to 64 bytes.
    Checked strictly here: standardwebhooks decodes leniently, skipping stray characters,
    so a mistyped secret would sign with a key no subscriber has."""
    secret = text.strip()
    encoded = secret.removeprefix("whsec_")
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except binascii.Error:
        key = b""
    if secret and (encoded == secret or not 24 <= len(key) <= 64):
        raise ValueError("must be whsec_ and the base64 of 24 to 64 random bytes (a Standard "
                         "Webhooks secret); make one with 'plant-store webhooks secret'")
    return secret


def web_origins(text: str) -> tuple[str, ...]:
    """Each origin as a browser sends it (lower case, no default port), so that it matches."""
    origins = []
    for origin in text.replace(",", " ").split():
        parts = urlsplit(origin)
        port = _port(parts)
        if origin != "*" and (parts.scheme.lower() not in ("http", "https") or not parts.hostname
                              or port == -1 or parts.path or parts.query or parts.fragment):
            raise ValueError(f"{origin!r} is not an origin (scheme://host[:port]) or *")
        if origin != "*":
            scheme, host = parts.scheme.lower(), parts.hostname or ""  # not "": refused above
            host = f"[{host}]" if ":" in host else host
            default = {"http": 80, "https": 443}[scheme]
            origin = f"{scheme}://{host}" + (f":{port}" if port and port != default else "")
        origins.append(origin)
    return tuple(origins)


def file_path(text: str) -> str:
    if "\0" in text:
        raise ValueError("a path cannot hold a NUL character")
    return text
