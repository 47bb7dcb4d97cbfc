"""Bearer tokens, kept on disk only as SHA-256 hashes.

The file is JSON, mode 0600, replaced atomically on every change. The server reloads it
when its stat signature changes, looking at most once per ``recheck`` seconds, so issuing
or revoking a token needs no restart.
"""

import contextlib
import fcntl
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timezone

from plant_store.util import files

log = logging.getLogger(__name__)


MAX_FILE_SIZE = 1 << 20  # about 5,000 tokens; a larger file is refused, not read


class TokenError(Exception):
    """A token command cannot be carried out; the message is meant for the operator."""


class TokenFileError(TokenError):
    """The token file itself cannot be used: the operator's fix is to ``token_file`` (or the
    ``data_dir`` it defaults to), so the command line names that setting."""


@dataclass(frozen=True)
class TokenEntry:
    """One token as the file keeps it: its hash, label and creation time, never the token."""

    label: str
    sha256: str
    created: str


_FIELDS = [field.name for field in fields(TokenEntry)]
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _is_entry(entry: object) -> bool:
    """Whether a file's entry is what ``_write`` writes; anything else would fail later, per
    request, as a 500."""
    return (isinstance(entry, dict) and sorted(entry) == sorted(_FIELDS)
            and all(isinstance(value, str) for value in entry.values())
            and _SHA256.fullmatch(entry["sha256"]) is not None)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


# RFC 6750's b64token: what can follow "Bearer " in an Authorization header.
_PRESENTABLE = re.compile(r"[A-Za-z0-9._~+/-]+=*")


class StaticTokens:
    """Tokens held in memory, never on disk: for tests, and for a host application that keeps
    its secrets elsewhere. Checked as the file's are: by hash, in constant time."""

    def __init__(self, tokens: Iterable[str] | Mapping[str, str]) -> None:
        """``tokens``: the tokens, or a mapping of each token to its label."""
        if isinstance(tokens, str | bytes):  # its characters would each be a token
            raise TokenError("StaticTokens takes a list of tokens (or a mapping of each to "
                             "its label), not one string")
        labelled = tokens if isinstance(tokens, Mapping) else {
            token: f"token {n}" for n, token in enumerate(tokens, 1)}
        if not all(isinstance(t, str) and t and isinstance(label, str) and label
                   for t, label in labelled.items()):
            raise TokenError("every token and label must be a non-empty string")
        for token in labelled:
            if not _PRESENTABLE.fullmatch(token):  # the check strips and splits the header
                raise TokenError("a token must be what a client can send after 'Bearer ': "
                                 "letters, digits and -._~+/ (then any '='), no spaces")
        self._hashes = tuple((_digest(t).encode(), label) for t, label in labelled.items())

    def verify(self, token: str) -> str | None:
        presented, label = _digest(token).encode(), None
        for digest, entry_label in self._hashes:
            if hmac.compare_digest(digest, presented):
                label = entry_label
        return label

    def __len__(self) -> int:
        return len(self._hashes)


class TokenFile:
    """Tokens kept in a JSON file as SHA-256 hashes, read again when the file changes (so a
    revoke reaches running servers within a second)."""

    def __init__(
        self, path: str, *, recheck: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.path = path
        self._recheck = recheck
        self._clock = clock
        self._lock = threading.Lock()
        self._signature: object = None  # (mtime, size, inode) of the file last read
        # The hashes last read, and the tokens since found to match them (at most one per
        # hash), kept together so a reload drops both at once.
        self._current: tuple[tuple[tuple[bytes, str], ...], dict[str, str]] = ((), {})
        self._next_check = 0.0
        self._problem: str | None = None  # why the last read failed (every token refused)

    # The server's side.

    def verify(self, token: str) -> str | None:
        """The label of ``token`` if it is valid, else None.

        A token is hashed and compared with every entry in constant time; once found valid
        it is remembered until the file changes, and then costs one dict lookup (whose
        timing depends on a keyed hash of the token, not on how much of it is right).
        """
        if (now := self._clock()) >= self._next_check:  # here, not in a call: once a second
            self._refresh(now)
        current = self._current
        label = current[1].get(token)
        if label is not None:
            return label
        hashes, known = current
        presented = _digest(token).encode()
        for digest, entry_label in hashes:
            if hmac.compare_digest(digest, presented):
                label = entry_label
        if label is not None:
            known[token] = label
        return label

    def _refresh(self, now: float) -> None:
        with self._lock:
            if now < self._next_check:  # another thread reloaded while we waited
                return
            self._reload()
            # Only now: a thread that sees the new deadline must also see the new hashes.
            self._next_check = now + self._recheck

    def _reload(self) -> None:
        try:
            st = os.stat(self.path)
            signature: object = (st.st_mtime_ns, st.st_size, st.st_ino)
        except FileNotFoundError:
            signature = "missing"
        except OSError as exc:  # a path through a file, say: read below, refused, logged
            signature = ("unreadable", exc.errno)
        if signature == self._signature:
            return
        try:
            entries = self.entries()
            self._problem = None
        except TokenError as exc:
            log.error("%s; refusing every token until it is fixed", exc)
            entries = []
            self._problem = str(exc)
        self._current = (tuple((e.sha256.encode(), e.label) for e in entries), {})
        self._signature = signature

    def problem(self) -> str | None:
        """Why every token is refused now (the file cannot be read), or None: what
        ``/ready`` says, since a server that refuses every client is not ready."""
        self._refresh(self._clock())  # at most once a recheck, as verify
        return self._problem

    # The operator's side.

    def entries(self) -> list[TokenEntry]:
        """The file's tokens; none when it does not exist; TokenError when it is malformed."""
        try:
            data = json.loads(self._read())
        except FileNotFoundError:
            return []
        except (OSError, ValueError, RecursionError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise TokenFileError(f"cannot read token file {self.path}: {reason}") from None
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list) or not all(map(_is_entry, tokens)):
            raise TokenFileError(f"cannot read token file {self.path}: not a list of tokens, "
                             f"each an object of the strings {', '.join(_FIELDS)} "
                             "(sha256 in lowercase hex)")
        return [TokenEntry(**entry) for entry in tokens]

    def _read(self) -> bytes:
        """The file's bytes, if it is a regular file of at most MAX_FILE_SIZE: a FIFO or a
        device put in its place would hold every request's check forever."""
        with open(self.path, "rb", opener=files.opener) as fh:
            data = fh.read(MAX_FILE_SIZE + 1)
        if len(data) > MAX_FILE_SIZE:
            raise ValueError(f"larger than {MAX_FILE_SIZE} bytes")
        return data

    def add(self, label: str) -> str:
        """Make a token, store its hash under ``label``, and return it (the only copy)."""
        if not label or label != label.strip() or not label.isprintable():
            raise TokenError("a token label must be non-empty, printable, without surrounding "
                             "spaces")
        with self._changing():
            return self._add(label)

    def add_first(self, label: str) -> str | None:
        """A first token, made only if there is no token file (an empty one means every
        token was revoked); None when there is one. Instances starting together on one data
        directory make one between them."""
        with self._changing():
            return None if os.path.exists(self.path) else self._add(label)

    def revoke(self, label: str) -> None:
        with self._changing():
            entries = self.entries()
            kept = [e for e in entries if e.label != label]
            if len(kept) == len(entries):
                raise TokenError(f"no token labelled {label!r}")
            self._write(kept)

    def _add(self, label: str) -> str:
        entries = self.entries()
        if any(e.label == label for e in entries):
            raise TokenError(f"a token labelled {label!r} exists; revoke it first")
        token = secrets.token_urlsafe(32)
        created = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self._write([*entries, TokenEntry(label, _digest(token), created)])
        return token

    @contextlib.contextmanager
    def _changing(self) -> Iterator[None]:
        """One change of the file at a time, across processes: each reads the entries and
        writes them back, and two at once would lose one of the two."""
        directory = os.path.dirname(os.path.abspath(self.path))
        try:
            os.makedirs(directory, exist_ok=True)
            fd = files.opener(self.path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise TokenFileError(f"cannot lock token file {self.path} (by {self.path}.lock): "
                                 f"{exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _write(self, entries: list[TokenEntry]) -> None:
        """Replace the file (under ``_changing``, which made its directory); mode 0600."""
        try:
            with files.replacing(self.path) as fh:
                fh.write(json.dumps({"tokens": [asdict(e) for e in entries]}, indent=1).encode())
        except OSError as exc:
            raise TokenFileError(f"cannot write token file {self.path}: {exc.strerror}") from None
