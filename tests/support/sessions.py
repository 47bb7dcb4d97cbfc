"""The shell sessions of README.rst and the documentation pages (:data:`PAGES`, in that
order), parsed and run in order in one bash, as a reader would.

What a session is: a literal block whose first line starts with ``$ ``. Each ``$ `` line
(with its ``\\``-continued lines) is a command; the lines after it, up to the next ``$ ``,
are what it prints, stdout and stderr together. In the expected output a line ``...``
stands for any number of lines and ``...`` inside a line for any text. A literal block
after a paragraph saying "Save this as ``NAME``" is written to NAME before the sessions
after it run.

Only what must vary is normalized, on both sides: the ports (the pages' 8080, 8081,
8082 and 9000 become free ports), the clone's directory (``/srv/plant-store`` in the
pages), tokens, delivery ids, times and PIDs.

Every page of ``docs/`` that holds a session must be in :data:`PAGES`, in the order a reader
follows them (each goes on from the state the one before left: a server running, plants
stored); tests/docs/test_readme_sessions.py checks that none is left out.
"""

import contextlib
import os
import pathlib
import re
import select
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The pages whose sessions run, in this order, in one shell: relative to the clone.
PAGES = (
    "README.rst",
    "docs/tutorial.rst",  # a token, serve, create, list, delete, webhooks, health, tokens
    "docs/settings.rst",  # bad values, beside the tutorial's running server
    "docs/durability.rst",  # check; the server stopped; compact
    "docs/postgresql.rst",  # two instances on one database, then back to the JSON file
    "docs/backups.rst",  # export and import
)

README_PORTS = (8080, 8081, 8082, 9000)
README_CLONE = "/srv/plant-store"
NORMALIZE = (
    # secrets.token_urlsafe(32), which may start or end with '-' (where \b would not match)
    (re.compile(r"(?<![A-Za-z0-9_-])[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])"), "<token>"),
    (re.compile(r"\b[0-9a-f]{32}\b"), "<id>"),  # delivery ids
    (re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:\d\d)?"),
     "<time>"),
    (re.compile(r"\bPID \d+"), "PID <n>"),
)


@dataclass
class Step:
    line: int  # in its page
    command: str
    expected: list[str]
    page: str = ""


@dataclass
class Block:
    line: int
    intro: str  # the paragraph before the block
    text: str
    steps: list[Step] = field(default_factory=list)
    page: str = ""

    @property
    def save_as(self) -> str | None:
        match = re.search(r"[Ss]ave (?:this|it) as ``([^`]+)``", self.intro)
        return match.group(1) if match else None


def page_blocks(pages: tuple[str, ...] = PAGES) -> list[Block]:
    """Every literal block of the pages, page after page, each step naming its page."""
    blocks = []
    for page in pages:
        for block in literal_blocks((ROOT / page).read_text("utf-8")):
            block.page = page
            for step in block.steps:
                step.page = page
            blocks.append(block)
    return blocks


def literal_blocks(text: str) -> list[Block]:
    """Every ``::`` literal block, dedented, with the paragraph that introduces it."""
    lines = text.splitlines()
    blocks, paragraph = [], []
    n = 0
    while n < len(lines):
        line = lines[n]
        paragraph = [] if not line.strip() else [*paragraph, line.strip()]
        if not line.rstrip().endswith("::") or line.lstrip().startswith(".. "):
            n += 1
            continue
        base = len(line) - len(line.lstrip())
        start = n + 1
        while start < len(lines) and not lines[start].strip():
            start += 1
        end = start
        while end < len(lines) and (not lines[end].strip()
                                    or len(lines[end]) - len(lines[end].lstrip()) > base):
            end += 1
        body = lines[start:end]
        while body and not body[-1].strip():
            body.pop()
        indent = min((len(b) - len(b.lstrip()) for b in body if b.strip()), default=0)
        block = Block(start + 1, " ".join(paragraph), "\n".join(b[indent:] for b in body))
        if block.text.startswith("$ "):
            block.steps = _steps(block)
        blocks.append(block)
        paragraph, n = [], end
    return blocks


def _steps(block: Block) -> list[Step]:
    steps: list[Step] = []
    lines = block.text.splitlines()
    n = 0
    while n < len(lines):
        first = n
        command = [lines[n][2:]]
        while command[-1].endswith("\\"):
            n += 1
            command.append(lines[n])
        n += 1
        expected = []
        while n < len(lines) and not lines[n].startswith("$ "):
            expected.append(lines[n])
            n += 1
        steps.append(Step(block.line + first, "\n".join(command), expected))
    return steps


def normalize(text: str, ports: dict[int, int], clone: str) -> str:
    """The actual output's varying parts in the pages' words."""
    text = text.replace(clone, README_CLONE)
    for readme, real in ports.items():
        text = re.sub(rf"\b{real}\b", str(readme), text)
    for pattern, replacement in NORMALIZE:
        text = pattern.sub(replacement, text)
    return text


def matches(expected: list[str], actual: str) -> bool:
    pattern = ""
    for line in expected:
        line = line.rstrip()
        if line == "...":
            pattern += r"(?:[^\n]*\n)*?"
        else:
            for part_pattern, replacement in NORMALIZE:
                line = part_pattern.sub(replacement, line)
            pattern += r"[^\n]*".join(map(re.escape, line.split("..."))) + r"\n"
    return re.fullmatch(pattern, actual) is not None


class Shell:
    """One bash for every session, in its own process group so that the servers it starts
    in the background end with it."""

    def __init__(self, cwd: str, env: dict[str, str]) -> None:
        self.cwd = cwd
        self._proc = subprocess.Popen(
            ["bash", "--norc", "--noprofile"], cwd=cwd, env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        self._buffer = b""

    def run(self, command: str, timeout: float = 60) -> tuple[str, int]:
        marker = f"__done_{uuid.uuid4().hex}__"
        script = f"{command}\nprintf '\\n{marker} %d\\n' $?\n"
        self._proc.stdin.write(script.encode())
        self._proc.stdin.flush()
        deadline = time.monotonic() + timeout
        while (match := re.search(rb"\n?" + marker.encode() + rb" (\d+)\n", self._buffer)) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no end of {command!r} within {timeout} s; so far: "
                                   f"{self._buffer.decode(errors='replace')}")
            ready, _, _ = select.select([self._proc.stdout], [], [], left)
            if ready:
                chunk = os.read(self._proc.stdout.fileno(), 65536)
                if not chunk:
                    raise EOFError(f"bash ended during {command!r}")
                self._buffer += chunk
        output = self._buffer[:match.start()].decode(errors="replace")
        self._buffer = self._buffer[match.end():]
        return output, int(match.group(1))

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGTERM)
        try:
            self._proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
        self._proc.stdin.close()
        self._proc.stdout.close()


def wait_for_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on port {port} after {timeout} s") from None
            time.sleep(0.05)
