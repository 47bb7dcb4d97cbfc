"""The run's closing lines name every cause of a skip (issue 46: 58 proxy tests skipped
silently where nginx, Apache or Caddy were missing)."""

from types import SimpleNamespace

from support.plugins.skip_summary import skip_causes


def report(reason):
    return SimpleNamespace(longrepr=("tests/x.py", 1, f"Skipped: {reason}"))


def test_one_line_per_cause_most_frequent_first():
    reports = [report("nginx is not installed")] * 3 + [report("Caddy is not installed")]
    assert skip_causes(reports) == ["3 tests skipped: nginx is not installed",
                                    "1 test skipped: Caddy is not installed"]


def test_no_skip_no_line():
    assert skip_causes([]) == []
