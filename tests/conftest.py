"""The run's fixtures and hooks: each plugin in tests/support/plugins/ is of one concern.
Nothing here or there is imported by a test; what tests share is in tests/support/."""

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
