"""Plant Store in your own tests: the whole app on a memory store, with tokens you choose.

::

    from plant_store.testing import make_app

    app = make_app(tokens=["secret"])          # a WSGI app: WebTest, falcon.testing, ...

Nothing touches the disk or the network, and every call makes a new, empty store. With
pytest, ``pytest_plugins = ["plant_store.testing"]`` in the test module that uses the
fixtures, or in the ``conftest.py`` at the top of your tests (pytest's rootdir: pytest
refuses ``pytest_plugins`` in a ``conftest.py`` further down), gives the fixtures
``plant_store_app`` (a fresh app per test) and ``plant_store_token`` (a token it accepts).
docs/embedding.rst says so in the same words, and how to quiet webob's ``'cgi' is
deprecated`` warning in a WebTest run.
"""

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from plant_store.app import create_app
from plant_store.config import Config
from plant_store.metrics import for_config
from plant_store.stores import MemoryStore
from plant_store.tokens import StaticTokens, TokenError

TOKEN = "plant-store-test-token"  # what the fixtures' app accepts


def make_app(
    tokens: Iterable[str] | Mapping[str, str] | StaticTokens = (TOKEN,), **settings: Any,
) -> Callable[..., Iterable[bytes]]:
    """The service on a new memory store, accepting ``tokens`` (a list, a mapping of each
    token to its label, or a StaticTokens); ``settings`` as in ``plant-store.ini``
    (``url_prefix="/api"``, ``page_size=2``...), as Python values or their text. Raises
    TokenError for tokens no client could send."""
    if not isinstance(tokens, StaticTokens):
        if not isinstance(tokens, Iterable):
            raise TokenError(f"make_app's tokens: a list of tokens, a mapping of each to "
                             f"its label, or a StaticTokens, not {type(tokens).__name__}")
        tokens = StaticTokens(tokens)
    config = Config(**{"store": "memory", **settings})
    store = MemoryStore()
    return create_app(config, store=store, tokens=tokens, metrics=for_config(config, store))


try:
    import pytest
except ImportError:  # plain unittest: make_app is all there is
    pass
else:
    @pytest.fixture
    def plant_store_token() -> str:
        return TOKEN

    @pytest.fixture
    def plant_store_app(
        plant_store_token: str,
    ) -> Iterator[Callable[..., Iterable[bytes]]]:
        yield make_app(tokens=[plant_store_token])
