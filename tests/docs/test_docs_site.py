"""The documentation site: Sphinx builds docs/ with warnings as errors, every internal link
and anchor of the built pages resolves, nothing is fetched from the network, the generated
reference pages follow their sources, and a real browser renders the front page and a
reference page (screenshots in test-artifacts/)."""

import fcntl
import hashlib
import json
import pathlib
import shutil
import subprocess
import sys
import urllib.parse
from html.parser import HTMLParser

import pytest

from plant_store import config
from plant_store.cli import program as cli_args

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
ARTIFACTS = ROOT / "test-artifacts"
BUILD_LOCK = pathlib.Path("/tmp") / (
    f"plant-store-docs-{hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]}.lock")
PAGES = {  # each part of the site (Diátaxis), a few of its pages
    "tutorial", "deploying", "proxies", "postgresql", "postgresql-topologies", "processes",
    "webhooks", "backups", "embedding", "settings", "http", "errors", "metrics", "cli",
    "CONTRACT", "seed-plant-store", "durability", "ordering", "outbox", "forwarded"}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site, built as README.rst says, with warnings as errors, in at most 3 minutes."""
    out = tmp_path_factory.mktemp("site")
    # conf.py writes docs/_generated/ in the clone: one build at a time (pytest-xdist
    # workers may each need the site).
    with open(BUILD_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        build = subprocess.run(
            [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
             str(DOCS), str(out)],
            capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert build.returncode == 0, build.stdout + build.stderr
    assert build.stderr == "", build.stderr
    return out


class _Page(HTMLParser):
    """The link targets (href, src) and anchors (id, name) of one HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.targets: list[tuple[str, str]] = []  # (tag, target)
        self.anchors: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if value is None:
                continue
            if name in ("href", "src"):
                self.targets.append((tag, value))
            elif name in ("id", "name") and tag != "meta":
                self.anchors.add(value)


def _parse(path: pathlib.Path) -> _Page:
    page = _Page()
    page.feed(path.read_text("utf-8"))
    return page


@pytest.mark.slow
def test_the_site_has_the_tutorial_how_tos_reference_and_explanations(site):
    built = {p.stem for p in site.glob("*.html")}
    assert PAGES | {"index"} <= built, sorted(PAGES - built)
    index = (site / "index.html").read_text("utf-8")
    for caption in ("Tutorial", "How-to guides", "Reference", "Explanation"):
        assert caption in index


@pytest.mark.slow
def test_no_internal_link_or_anchor_points_at_nothing(site):
    pages = {path: _parse(path) for path in site.rglob("*.html")}
    broken, remote = [], []
    for path, page in pages.items():
        for tag, target in page.targets:
            parts = urllib.parse.urlsplit(target)
            if parts.scheme in ("http", "https"):
                if tag != "a":  # a stylesheet, script or image from the network
                    remote.append(f"{path.name}: <{tag}> {target}")
                continue
            if parts.scheme or target.startswith("//"):  # mailto:, data:, javascript:
                continue
            file = (path.parent / urllib.parse.unquote(parts.path)).resolve() if parts.path \
                else path
            if not file.exists():
                broken.append(f"{path.relative_to(site)}: {target}")
            elif parts.fragment and file.suffix == ".html":
                anchors = (pages.get(file) or _parse(file)).anchors
                if urllib.parse.unquote(parts.fragment) not in anchors:
                    broken.append(f"{path.relative_to(site)}: {target} (no such anchor)")
    assert broken == []
    assert remote == []
    assert sum(len(p.targets) for p in pages.values()) > 500, "the pages' links were not read"


def test_the_settings_reference_is_generated_from_the_declaration(site):
    text = (site / "settings.html").read_text("utf-8")
    for setting in config.SETTINGS:
        assert f">{setting.name}<" in text, setting.name
        assert setting.env in text and setting.flag in text, setting.name


def test_the_http_reference_is_generated_from_the_openapi_document(site):
    document = json.loads((ROOT / "plant_store" / "http" / "openapi.json").read_text("utf-8"))
    text = (site / "http.html").read_text("utf-8")
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method in ("get", "head", "post", "put", "patch", "delete", "options"):
                assert f"{method.upper()} {path}" in text.replace("&#123;", "{").replace(
                    "&#125;", "}"), (method, path)
                for status in operation["responses"]:
                    assert f"<p>{status}</p>" in text, (method, path, status)


def test_the_cli_reference_is_the_parsers_own_help(site):
    parser = cli_args.parser()
    commands = next(a for a in parser._actions if isinstance(getattr(a, "choices", None), dict))
    text = (site / "cli.html").read_text("utf-8")
    for name in commands.choices:
        assert f"usage: plant-store {name}" in text, name
    assert "usage: plant-store token add" in text


def test_a_browser_renders_the_front_page_and_a_reference_page(site, browser, capsys):
    """Headless Chromium opens the built pages from disk: each renders its title, nothing
    fails to load, and nothing is asked of the network. The screenshots are kept."""
    ARTIFACTS.mkdir(exist_ok=True)
    shots = []
    for page, heading in (("index", "Plant Store"), ("settings", "Settings")):
        browser.open((site / f"{page}.html").as_uri())
        h1 = browser.driver.find_element("css selector", "article h1")
        assert h1.text.rstrip("#¶ \n") == heading
        browser.drain()
        assert browser.failures == [] and browser.console == [], (browser.failures,
                                                                   browser.console)
        assert all(url.startswith(("file:", "data:")) for url in browser.responses), \
            sorted(browser.responses)
        shot = site / f"docs-site-{page}.png"
        browser.driver.save_screenshot(str(shot))
        shutil.copyfile(shot, ARTIFACTS / shot.name)
        shots.append(ARTIFACTS / shot.name)
    with capsys.disabled():
        print("\ndocs site screenshots: " + ", ".join(map(str, shots)))
