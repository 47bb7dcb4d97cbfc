"""``tokens`` and ``token``: a token file, and a token in it."""

import pytest

from plant_store.tokens import TokenFile


@pytest.fixture
def tokens(tmp_path):
    """A token file checked on every request, so tests see changes at once."""
    return TokenFile(str(tmp_path / "tokens.json"), recheck=0)


@pytest.fixture
def token(tokens):
    return tokens.add("tests")

