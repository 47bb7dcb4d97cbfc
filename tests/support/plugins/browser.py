"""``browser``: the run's headless Chromium."""

import pytest

from support.browser import Browser, find_chromium
from support.needs import NO_CHROMIUM, needed
from support.proxies import certificates


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for the whole run (tests/support/browser.py). Without Debian's chromium
    and chromium-driver the tests that need it skip, and the summary says how many; in CI
    (``CI=true``) they fail instead, since CI must run them."""
    found = needed(find_chromium(), NO_CHROMIUM, "chromium, chromium-driver", "browser")
    # It trusts the proxies' test certificate (tests/support/proxies.py), for pages over HTTPS.
    browser = Browser(*found, trusted_keys=(certificates().spki,))
    try:
        yield browser
    finally:
        browser.quit()

