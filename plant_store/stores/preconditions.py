"""A write's preconditions (If-Match, If-None-Match), decided where the store decides.

The headers are parsed once, before any store lock (``http.etags.preconditions``), into
this value: the sets of versions each names, or :data:`ANY` for ``*``. The store calls
:meth:`Preconditions.refusal` with the version it holds, under its lock or row lock, so no
other write comes between the check and its own.

A version names one write of one id: it changes with every write and never repeats for
the id, across updates, deletes and re-creates, restores and imports (each store says how
it keeps that). A version of an earlier release has another shape (two parts, not three):
it names nothing here, so its request is refused, never misread. So a
precondition that held for a version the client saw never holds for a later write, even
one that put the same content back: a retried write cannot overwrite an acknowledged one.

The order (RFC 9110 13.2.2): If-None-Match first, so ``*`` or the stored version refuses
the write whatever the body; then a body equal to the stored plant writes nothing and
answers as done (13.1.1: a retried update answers as the first did); then If-Match.
"""

from dataclasses import dataclass

ANY: frozenset[str] = frozenset()  # "*": compared by identity, never by value
"""The value of a header that was ``*``."""


@dataclass(frozen=True, slots=True)
class Preconditions:
    """The versions If-Match names (strong comparison: weak tags left out) and those
    If-None-Match names (weak comparison); None where the header is absent."""

    if_match: frozenset[str] | None = None
    if_none_match: frozenset[str] | None = None

    def refusal(self, version: str, equal: bool = False) -> str | None:
        """The header that refuses a write over the stored ``version`` (``equal``: the
        write would change nothing), or None when the write may go on."""
        none_match = self.if_none_match
        if none_match is not None and (none_match is ANY or version in none_match):
            return "If-None-Match"
        if equal:
            return None
        match = self.if_match
        if match is not None and match is not ANY and version not in match:
            return "If-Match"
        return None
