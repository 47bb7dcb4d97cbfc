"""Shared suites: modules of test functions (and the fixtures they need) that more than one
test module runs, each on its own stores. A module that runs one imports its tests by name,
explicitly (``from support.suites.plant_store_contract import test_..., ...``), and gives the
fixtures it differs by (``store``, ``app``); pytest collects what the module holds. Nothing
here is collected where it stands (no name starts with ``test_``). ruff.toml's
``allowed-unused-imports`` says these imports are used: by pytest."""
