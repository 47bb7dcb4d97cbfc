"""What the tests share, each module named for what it holds and imported by name
(``from support.servers import Server``): tests/ is on sys.path (``pythonpath = tests`` in
setup.cfg's pytest section). Nothing here is collected; docs/development.rst says more."""
