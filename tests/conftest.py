"""The run's fixtures and hooks: each plugin in tests/support/plugins/ is of one concern.
Nothing here or there is imported by a test; what tests share is in tests/support/."""

import pathlib

import pytest

# Helpers' asserts explain themselves as a test's do.
pytest.register_assert_rewrite("support")

pytest_plugins = [
    "support.plugins.signals",  # ignored signals are not ignored in the processes started
    "support.plugins.unit_guard",  # tests/unit starts nothing
    "support.plugins.metrics_env",  # no test leaves PROMETHEUS_MULTIPROC_DIR behind
    "support.plugins.skip_summary",  # the closing lines: every cause of a skip
    "support.plugins.tokens",  # tokens, token
    "support.plugins.stores",  # store, each store in turn
    "support.plugins.postgres",  # postgres, database_url
    "support.plugins.browser",  # browser
    "support.plugins.apps",  # config, app
]


def pytest_xdist_auto_num_workers(config):
    """How many workers ``-n auto`` (setup.cfg) starts: two for tests/unit alone, whose
    tests all run in process (two cores, two workers: four were slower there beside another
    job), four for a run with real servers, whose tests mostly wait on them."""
    unit = pathlib.Path(__file__).parent / "unit"  # support.paths.UNIT, before it imports
    paths = [pathlib.Path(arg.split("::")[0]).resolve() for arg in config.args]
    return 2 if paths and all(path == unit or unit in path.parents for path in paths) else 4
