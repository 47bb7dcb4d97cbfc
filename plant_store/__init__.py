"""Plant Store: a small, durable WSGI service that keeps a store of plants."""

__version__ = "1.0.0"
