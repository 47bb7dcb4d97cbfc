"""Shared suites: modules of test functions (and the fixtures they need) that more than one
test module runs, each on its own stores. A module that runs one takes all of it
(``from support.suites.plant_store_contract import *``), so a test added to a suite runs
everywhere at once, and gives the fixture it differs by (``store``, ``app``); pytest collects
what the module holds, in the suite's order. Nothing here is collected where it stands (no
file name starts with ``test_``)."""
