"""Every setting, declared once.

Each setting is one attribute of :class:`Config`: its type, parser (most are
:mod:`plant_store.util.words`'), default and help in one line (:func:`setting`). The INI
file, the ``PLANT_STORE_<NAME>`` environment variables, the command-line flags and
``conf/plant-store.ini`` all come from :data:`SETTINGS`, read off that class, so a new
setting is one attribute.
Precedence, lowest first: defaults, INI file, environment, flags.
"""

import configparser
import os
import textwrap
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar, cast

from plant_store.logs import LOG_LEVELS
from plant_store.util import forwarded, words
from plant_store.util.loopback import clear_text_urls
from plant_store.util.words import (
    FLAG,
    OneOf,
    file_path,
    http_urls,
    integer_in,
    number_in,
    web_origins,
)

SECTION = "plant-store"
ENV_PREFIX = "PLANT_STORE_"


class ConfigError(Exception):
    """A setting has a value the service cannot run with."""


T = TypeVar("T")


class Setting:
    """One setting: how its text is parsed (its type), its default text, its help. Declared
    once, as an attribute of :class:`Config` (see :func:`setting`), which names it."""

    name = ""  # the Config attribute it is declared as

    def __init__(self, parse: Callable[[str], Any], default: str, help: str,
                 unit: str = "") -> None:
        self.parse, self.default, self.help = parse, default, help
        self.unit = unit  # what a value is, for --help: SECONDS, FILE...; empty: the name

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def metavar(self) -> str:
        choices = getattr(self.parse, "choices", None)
        return "{" + ",".join(choices) + "}" if choices else self.unit or self.name.upper()


def setting(parse: Callable[[str], T], default: str, help: str, unit: str = "") -> T:
    """Declare a setting as a :class:`Config` attribute: ``port: int = setting(...)``. Typed
    as what ``parse`` returns, so mypy checks the attribute's annotation against the parser
    (the value each Config holds); the class itself keeps the :class:`Setting`."""
    return cast(T, Setting(parse, default, help, unit))


SECRETS = frozenset({"database_url", "webhook_secret"})  # never shown, not even in a repr


class Config:
    """Typed values of every setting; construct with overrides, e.g. ``Config(store="memory")``."""

    server: str = setting(OneOf("waitress", "granian"), "waitress",
        "The HTTP server of 'plant-store serve': 'waitress' (pure Python, one process), or "
        "'granian' (Rust I/O; pip install 'plant-store[granian]'), whose worker processes "
        "each serve the app (see workers). A setting granian cannot honour as waitress "
        "does is refused at start, saying why.")
    workers: int = setting(integer_in(1, 64), "1",
        "Worker processes of server = granian, each with its own threads, store "
        "connections and probe port; above 1 only with store = postgresql (one process "
        "serves a data directory). Waitress is one process: 1 only.", unit="N")
    host: str = setting(str, "127.0.0.1", "Address the server listens on.")
    port: int = setting(integer_in(0, 65535), "8080", "TCP port; 0 lets the OS pick a free one.")
    probe_port: int = setting(integer_in(0, 65535), "0",
        "Also answer /health and /ready on this port (on host; under gunicorn, on the "
        "host of its first -b), from threads of their own, whatever the service's "
        "port and threads are doing (all connections taken, every thread waiting); "
        "under uWSGI, and gunicorn with plant_store.gunicorn_hooks, in every worker; "
        "0: off.",
        unit="PORT")
    threads: int = setting(integer_in(1, 256), "16",
        "Request threads (waitress's worker threads; granian's blocking threads, per "
        "worker); more of them share each fsync (group commit).", unit="N")
    connection_limit: int = setting(integer_in(10, 1000), "100",
        "Most connections waitress holds open, counting its own listening socket and "
        "wake-up pipe (under server = granian: each worker's connections). At the limit, "
        "every connection that has sent nothing for a second and waits for no answer is "
        "closed, to let new clients in, and if that frees too few, the connections "
        "reading their answers slowest.",
        unit="N")
    channel_timeout: int = setting(integer_in(1, 86400), "120",
        "Seconds a connection may go without sending or receiving a byte, outside a "
        "request the app is handling, before waitress closes it (checked every 30 s, or "
        "this often if shorter; under server = granian, every second). A client that "
        "sends a byte now and then is never closed. Behind nginx keep it above nginx's "
        "upstream keepalive_timeout (60 s).",
        unit="SECONDS")
    request_timeout: int = setting(integer_in(1, 3600), "30",
        "Seconds a client gets to send a request whole (its headers and body, from its "
        "first byte), and that an answer may wait without the client reading any of "
        "it; then its connection is closed (checked every second), so slow or stalled "
        "clients hold no connection or thread for long. Under server = granian (at most "
        "60): the headers' deadline, from their first byte (hyper's), a connection that "
        "sends nothing is closed this long after it was made, and an answer that waits "
        "as long is reset; a body has no deadline of its own there.",
        unit="SECONDS")
    min_send_rate: int = setting(integer_in(0, 1 << 30), "4096",
        "Bytes a second an answer must move at, on average over send_rate_window "
        "seconds of waiting for the client to read it; a slower connection is closed "
        "(checked every second), so clients that read a trickle hold no connection for "
        "long. 0: off.",
        unit="BYTES_PER_SECOND")
    send_rate_window: int = setting(integer_in(1, 3600), "20",
        "Seconds of waiting for a client to read its answer over which min_send_rate is "
        "averaged: a client that pauses and then reads fast loses nothing.",
        unit="SECONDS")
    store: str = setting(OneOf("memory", "jsonfile", "postgresql"), "jsonfile",
        "Where plants live: 'memory' (lost on exit), 'jsonfile' (durable, one process) "
        "or 'postgresql' (durable, any number of processes and instances).")
    database_url: str = setting(str, "",
        "The PostgreSQL database of store = postgresql: a libpq URL or key=value DSN. "
        "Keep the password out of it: libpq reads PGPASSWORD or a password file "
        "(PGPASSFILE, ~/.pgpass). Never printed or logged.", unit="URL")
    database_pool_size: int = setting(integer_in(1, 1000), "10",
        "Connections each process keeps to PostgreSQL at most; a request waits for one. "
        "Concurrent creates share one (they are written together, as one statement).",
        unit="N")
    database_timeout: float = setting(number_in(0.1, 300), "5",
        "Seconds a request may spend on PostgreSQL in all (waiting for a connection, "
        "running, retrying on another connection); past it the work is cancelled from "
        "the client side and the answer is 503, whatever the server does.",
        unit="SECONDS")
    statement_timeout: float = setting(number_in(0.1, 3600), "5",
        "Seconds PostgreSQL lets a statement run before it cancels it itself (frees the "
        "server from work no one waits for); checked on every new connection.",
        unit="SECONDS")
    database_prepared_statements: bool = setting(FLAG, "true",
        "Let psycopg prepare statements on the server. 'false' behind pgbouncer in "
        "transaction mode (before 1.21, or without max_prepared_statements), where a "
        "prepared statement's name may point at another session's statement. Off, the "
        "store requires statement_timeout to be the role's or database's own (at most "
        "this statement_timeout), as a session's SET holds on one server connection.",
        unit="BOOL")
    data_dir: str = setting(file_path, "plant-store-data",
        "Directory of the JSON-file store (plants.jsonl) and the default token file; a "
        "relative one is taken from the directory the command starts in.",
        unit="DIR")
    token_file: str = setting(file_path, "",
        "File of token hashes; empty means <data_dir>/tokens.json.", unit="FILE")
    lock_timeout: float = setting(number_in(0, 3600), "10",
        "Seconds a starting server waits for the process that owns data_dir to let go "
        "(a reload's old worker finishing its requests) before it refuses; 0: at once.",
        unit="SECONDS")
    max_body_size: int = setting(integer_in(1, 1 << 30), "65536",
        "Largest request body in bytes; larger bodies get 413 unread.", unit="BYTES")
    page_size: int = setting(integer_in(1, 2**31 - 1), "100",
        "Plants in a GET /plants page when the request gives no limit.", unit="N")
    max_page_size: int = setting(integer_in(1, 2**31 - 1), "1000",
        "Largest page; a larger limit is capped to it, not refused.", unit="N")
    compact_dead_share: float = setting(number_in(0, 0.99), "0.5",
        "Compact the JSON-file store in the background once this share of its records "
        "is dead (deleted plants, settled webhook deliveries); 0 turns it off. "
        "'plant-store compact' does it by hand.", unit="SHARE")
    fsync: bool = setting(FLAG, "true",
        "Flush each write to disk before answering. 'false' is UNSAFE: a power loss or "
        "OS crash can lose acknowledged plants. For benchmarks only.")
    log_level: str = setting(OneOf(*LOG_LEVELS), "info",
        "Lowest level logged to stderr; 'info' includes one access line per request.")
    log_format: str = setting(OneOf("text", "json"), "text",
        "'text' lines, or 'json': one JSON object per line, for log shippers.")
    trusted_proxy: str = setting(forwarded.proxies, "",
        "IP addresses or networks of the reverse proxies whose forwarded headers are "
        "believed, space-separated (e.g. 127.0.0.1, or 10.0.0.0/8; '*' for any peer, as "
        "behind a Unix socket). Empty: forwarded headers are ignored and removed. Applied "
        "by the app itself, under any WSGI server.", unit="ADDRESSES")
    trusted_proxy_count: int = setting(integer_in(1, 10), "1",
        "Trusted proxies in a row in front of the service: of each forwarded header's "
        "comma-separated hops, the one this many from the right is believed (what a "
        "client sent sits to its left).", unit="N")
    trusted_proxy_headers: str = setting(forwarded.header_names,
        "x-forwarded-for x-forwarded-proto x-forwarded-host",
        "Forwarded headers taken from the trusted proxy, space-separated, from: "
        + " ".join(forwarded.HEADERS) + ". List only those the proxy sets itself, "
        "overwriting what a client sent.", unit="HEADERS")
    url_prefix: str = setting(forwarded.url_prefix, "",
        "Path the proxy serves the API under (e.g. /api), stripped from request paths "
        "and put back in the URLs the service emits. Empty: served at the root. Applied "
        "by the app itself, under any WSGI server.", unit="PATH")
    require_https: bool = setting(FLAG, "false",
        "Refuse (403) every request but /health and /ready whose scheme is not https: "
        "over TLS to the service itself, or https in X-Forwarded-Proto (or Forwarded) from "
        "a trusted_proxy. Checked before the bearer token, so a client configured with "
        "an http:// URL fails at once. Also refuses an http:// webhook_urls entry other "
        "than loopback. Set it in every deployment reached from beyond loopback.",
        unit="BOOL")
    tls_certificate: str = setting(file_path, "",
        "Serve HTTPS directly: the certificate chain's PEM file (with tls_key). Under "
        "server = granian only (waitress has no TLS: terminate it at a proxy, 'plant-store "
        "docs tls'). Read at start: a renewed certificate is served from the next start.",
        unit="FILE")
    tls_key: str = setting(file_path, "",
        "The private key's PEM file of tls_certificate.", unit="FILE")
    metrics: str = setting(OneOf("off", "public", "token"), "token",
        "Who may read GET /metrics (Prometheus text): 'token' (a bearer token, as for "
        "the plants: request rates and store health are not for anyone who asks), "
        "'public' (no token: a scraper on a private network), or 'off' (no path, and "
        "nothing counted).")
    rate_limit: float = setting(number_in(0, 1_000_000), "0",
        "Requests a second each client may make, sustained; past it the answer is 429 "
        "with Retry-After. A client is its bearer token (by label) when it sends a valid "
        "one, else its address (the real client's, behind trusted_proxy): on the paths "
        "open without a token, as a request to any other without a valid one is refused "
        "401 before the limit counts it. /health and /ready are never limited. Kept in "
        "memory, per process. 0: off. Beside nginx's "
        "limit_req: see 'plant-store docs deploying'.",
        unit="PER_SECOND")
    rate_limit_burst: int = setting(integer_in(0, 1_000_000), "20",
        "Requests a client may make at once beyond rate_limit after a pause, as nginx's "
        "limit_req burst= with nodelay: this many and one more at once, then rate_limit "
        "a second.", unit="N")
    cors_allow_origins: tuple[str, ...] = setting(web_origins, "",
        "Origins (scheme://host[:port], space-separated, or *) whose browser pages may "
        "call the API (CORS); preflights are answered without a token. Empty: no CORS "
        "headers at all.", unit="ORIGINS")
    webhook_urls: tuple[str, ...] = setting(http_urls, "",
        "Subscriber URLs, space-separated, each sent every new plant's NewPlant JSON. "
        "Empty: no webhook.", unit="URLS")
    webhook_secret: str = setting(words.webhook_secret, "",
        "Key of the deliveries' webhook-signature (Standard Webhooks HMAC-SHA256), shared "
        "with the subscribers: whsec_ and base64; 'plant-store webhooks secret' makes one. "
        "Required with webhook_urls. Never printed or logged.", unit="SECRET")
    webhook_max_attempts: int = setting(integer_in(1, 1000), "10",
        "Attempts per delivery before it is kept as a dead letter.", unit="N")
    webhook_backoff: float = setting(number_in(0.001, 3600), "1",
        "Seconds before the first retry; each later one waits twice as long (at most "
        "an hour), with random jitter.", unit="SECONDS")
    webhook_timeout: float = setting(number_in(0.1, 300), "10",
        "Seconds a whole delivery may take: connect, send and the full answer.",
        unit="SECONDS")

    origins: Mapping[str, str] = {}  # setting -> where its value came from; set by load()
    given: frozenset[str]  # the settings given a value, not left at their defaults

    def __init__(self, *, only: Collection[str] | None = None, **values: Any) -> None:
        """``only``: the settings read (all when None); the others keep their defaults, and
        a cross-check between two settings is made only when both are read."""
        read = frozenset(BY_NAME if only is None else only)
        unknown = (set(values) | read) - set(BY_NAME)
        if unknown:
            raise ConfigError(f"unknown setting {sorted(unknown)[0]!r}")
        self.given = frozenset(values)
        if set(values) - read:
            raise ConfigError(f"setting {sorted(set(values) - read)[0]!r} is not read here")
        for setting in SETTINGS:
            value = _text(values.get(setting.name, setting.default))
            value = _parse(setting, value, "default" if setting.name not in values else "")
            setattr(self, setting.name, value)
        if not self.token_file:
            self.token_file = os.path.join(self.data_dir, "tokens.json")
        if self.webhook_urls and not self.webhook_secret and (
                {"webhook_urls", "webhook_secret"} <= read):
            raise ConfigError("setting webhook_urls needs webhook_secret: deliveries are signed")
        if self.require_https and {"webhook_urls", "require_https"} <= read and (
                plain := clear_text_urls(self.webhook_urls)):
            raise ConfigError(f"setting webhook_urls names {plain[0]}, which is plain http "
                              "beyond loopback, but require_https is on: payloads and their "
                              "signatures would travel in the clear; use https://")
        if self.page_size > self.max_page_size and {"page_size", "max_page_size"} <= read:
            raise ConfigError(f"setting page_size={self.page_size} is above "
                              f"max_page_size={self.max_page_size}: no page could be that long")
        if self.store == "postgresql" and not self.database_url and (
                {"store", "database_url"} <= read):
            raise ConfigError("setting store=postgresql needs database_url")
        if bool(self.tls_certificate) != bool(self.tls_key) and (
                {"tls_certificate", "tls_key"} <= read):
            raise ConfigError("settings tls_certificate and tls_key go together: the "
                              "certificate and its key")
        if self.probe_port and self.probe_port == self.port and {"port", "probe_port"} <= read:
            raise ConfigError(f"setting probe_port={self.probe_port} is port too: the probes "
                              "need a port of their own (or 0, none)")

    def blame(self, name: str, problem: str) -> ConfigError:
        """An error naming the setting behind ``problem``, its value (never a secret's) and
        where that came from: the operator's fix is to that setting, in that place."""
        return _setting_error(name, setting_text(self, name),
                              self.origins.get(name, "default"), problem)

    def __repr__(self) -> str:
        pairs = ", ".join(f"{s.name}={'...' if s.name in SECRETS else repr(getattr(self, s.name))}"
                          for s in SETTINGS)
        return f"Config({pairs})"



# Every setting, in declaration order (the INI example's, --help's).
SETTINGS: tuple[Setting, ...] = tuple(
    value for value in vars(Config).values() if isinstance(value, Setting))
BY_NAME: Mapping[str, Setting] = {s.name: s for s in SETTINGS}


EXAMPLE_HEADER = f"""\
# Plant Store configuration: every setting, with its default.
# Use it with `plant-store serve --config plant-store.ini`.
# Precedence, lowest first: defaults, this file, {ENV_PREFIX}<SETTING> environment
# variables (e.g. {ENV_PREFIX}PORT=9000), command-line flags (e.g. --port 9000).

[{SECTION}]
"""


def example_ini() -> str:
    """Every setting with its default and its help, as an INI file to edit: what
    ``plant-store config example`` prints, and ``conf/plant-store.ini`` holds."""
    blocks = []
    for setting in SETTINGS:
        text = f"{setting.help} Environment: {setting.env}; flag: {setting.flag}."
        lines = textwrap.wrap(text, 86, break_on_hyphens=False, break_long_words=False)
        blocks.append("".join(f"# {line}\n" for line in lines)
                      + f"{setting.name} = {setting.default}".rstrip() + "\n")
    return EXAMPLE_HEADER + "".join("\n" + block for block in blocks)


def _text(value: Any) -> str:
    """A value given in Python as its INI text, so it is checked as the file's would be
    (``page_size=0`` refused as ``page_size = 0`` is; a bool is no integer)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, tuple | list):
        return " ".join(map(str, value))
    raise ConfigError(f"a setting's value must be a string, number, bool or list, not "
                      f"{type(value).__name__}")


def _parse(setting: Setting, text: str, source: str) -> Any:
    try:
        return setting.parse(text)
    except ValueError as exc:
        raise _setting_error(setting.name, text, source, str(exc)) from None


def _setting_error(name: str, text: str, source: str, problem: str) -> ConfigError:
    value = "" if name in SECRETS else f"={text!r}"  # a secret is never shown
    where = f" (from {source})" if source else ""
    return ConfigError(f"setting {name}{value}{where}: {problem}")


def load(
    path: str | None = None,
    environ: Mapping[str, str] | None = None,
    flags: Mapping[str, str | None] | None = None,
    only: Collection[str] | None = None,
) -> Config:
    """Merge the INI file, the environment and the flags over the defaults. ``only``: the
    settings the caller reads (all when None); what the sources say of the others is not
    parsed, so a value meant for another command never fails this one (the INI file's
    names are checked whole all the same: a misspelt one is a mistake wherever it is)."""
    read = frozenset(BY_NAME if only is None else only)
    raw: dict[str, tuple[str, str]] = {}
    if path:
        raw.update((name, value) for name, value in _read_ini(path).items() if name in read)
    for setting in SETTINGS:
        if setting.name not in read:
            continue
        if environ and setting.env in environ:
            raw[setting.name] = (environ[setting.env], f"environment {setting.env}")
        if flags and flags.get(setting.name) is not None:
            raw[setting.name] = (str(flags[setting.name]), f"flag {setting.flag}")
    values = {name: _parse(BY_NAME[name], text, source) for name, (text, source) in raw.items()}
    config = Config(only=read, **values)
    config.origins = {name: source for name, (_, source) in raw.items()}
    return config


def setting_text(config: Config, name: str) -> str:
    """A setting's value as it would be written in the INI file."""
    value = getattr(config, name)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return " ".join(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def _ini_problem(exc: configparser.Error) -> str:
    """What is wrong with an INI file, by line, without its text (a secret, maybe)."""
    if isinstance(exc, configparser.MissingSectionHeaderError):
        return f"line {exc.lineno} comes before any section; settings go under [{SECTION}]"
    if isinstance(exc, configparser.DuplicateSectionError | configparser.DuplicateOptionError):
        return f"line {exc.lineno} repeats a section or a setting"
    if isinstance(exc, configparser.ParsingError):
        return f"line {exc.errors[0][0]} is not 'name = value'"
    return type(exc).__name__


def _read_ini(path: str) -> dict[str, tuple[str, str]]:
    # "port = 8080    # a comment" as a reader would mean it, not a port of "8080    # ...".
    parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=("#", ";"))
    try:
        with open(path, encoding="utf-8-sig") as fh:  # a BOM, as some editors write, is fine
            parser.read_file(fh)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    except configparser.Error as exc:  # its message quotes the line: a secret, maybe
        raise ConfigError(f"config file {path}: {_ini_problem(exc)}") from None
    if not parser.has_section(SECTION):
        raise ConfigError(f"config file {path} has no [{SECTION}] section")
    raw = {}
    for name, text in parser.items(SECTION):
        if name not in BY_NAME:
            raise ConfigError(f"config file {path}: unknown setting {name!r}")
        raw[name] = (text, f"{path}")
    return raw
