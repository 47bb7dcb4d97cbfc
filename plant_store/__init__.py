"""Plant Store: a small, durable WSGI service that keeps a store of plants."""

# The one version of a release: the package's metadata, ``plant-store --version``, the
# start line, ``/ready`` and ``info.version`` of the OpenAPI document all say it
# (tests/unit/test_version.py holds them, and CHANGELOG.rst's top section, to it).
__version__ = "1.2.0"
