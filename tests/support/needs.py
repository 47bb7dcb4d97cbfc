"""What a test needs installed: found, or the test skips saying what is missing (in CI,
``CI=true``, it fails instead: CI must run it)."""

import os

import pytest

NO_POSTGRES = "PostgreSQL is not installed"
NO_CHROMIUM = "Chromium is not installed"


def needed(found, missing, packages, tests):
    """``found``, or skip the test saying what is missing; in CI (``CI=true``) fail instead."""
    if found is None:
        reason = f"{missing}; .ci/run installs it (Debian's {packages})"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}, and CI must run the {tests} tests", pytrace=False)
        pytest.skip(reason)
    return found
