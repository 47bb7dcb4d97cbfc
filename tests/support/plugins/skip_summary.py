"""The run's closing lines: every cause of a skip, and what is missing to run them."""

import collections

from plant_store.util.words import counted
from support.needs import NO_CHROMIUM, NO_POSTGRES

MISSING = [  # (the reason a test skips or fails with, what it is, how to install it)
    (NO_POSTGRES, "PostgreSQL", "apt-get install postgresql"),
    (NO_CHROMIUM, "browser", "apt-get install chromium chromium-driver"),
]


def skip_causes(skipped):
    """One closing line per cause of the ``skipped`` reports, most frequent first: a test
    that skips for want of nginx, Apache, Caddy, HAProxy, Chromium, PostgreSQL or a mount
    never skips silently (issue 46)."""
    causes = collections.Counter(
        str(report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr)
        .removeprefix("Skipped: ") for report in skipped)
    return [f"{counted(count, 'test')} skipped: {cause}" for cause, count in causes.most_common()]


def pytest_terminal_summary(terminalreporter):
    skipped = terminalreporter.stats.get("skipped", [])
    if skipped:
        terminalreporter.section("skipped, by cause", sep="-", yellow=True)
        for line in skip_causes(skipped):
            terminalreporter.write_line(line, yellow=True)
    for reason, what, install in MISSING:
        skips = sum(reason in str(report.longrepr) for report in skipped)
        errors = sum(reason in str(report.longrepr)
                     for report in terminalreporter.stats.get("error", []))
        if skips or errors:
            count = (f"{counted(skips, what + ' test')} skipped" if skips
                     else f"{counted(errors, what + ' test')} failed")
            terminalreporter.section(what, sep="!", red=True, bold=True)
            terminalreporter.write_line(f"{reason}: {count}; .ci/run installs it ({install})",
                                        red=True, bold=True)

