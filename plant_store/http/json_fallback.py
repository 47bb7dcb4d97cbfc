"""A second, slower parse for the one kind of valid JSON that orjson refuses.

orjson cannot hold a number beyond a double's range (an id of 310 digits, ``1e400``) and
refuses the whole body, though JSON sets numbers no range; the client would hear that its
body is not JSON instead of which field is wrong. Such a body, and only such a body, is
parsed again with the standard library, each of those numbers becoming ``inf`` (which every
field of the schema refuses, naming the field) and held to orjson's other rules: UTF-8, no
NaN or Infinity, no lone surrogates, nesting bounded (here by the interpreter's recursion
limit, which is below orjson's 1024 levels).
"""

import json

import orjson

OUT_OF_RANGE = "number is infinity when parsed as double"  # orjson's message for it
TOO_DEEP = "depth limit exceeded"  # orjson's message when nesting passes MAX_DEPTH
MAX_DEPTH = 1024  # orjson's: a body nesting arrays or objects deeper is refused


def reparse(body: bytes, error: orjson.JSONDecodeError) -> object:
    """The document orjson refused with ``error``; ValueError if it is not strict JSON."""
    if error.msg.startswith(TOO_DEEP):
        raise ValueError("nested too deeply") from None
    if not error.msg.startswith(OUT_OF_RANGE):
        raise error
    try:
        document = json.loads(body.decode("utf-8"), parse_int=_integer,
                              parse_constant=_refuse_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    _hold_to_orjsons_rules(document)
    return document


def _integer(text: str) -> int | float:
    """Up to 20 characters (int64's and uint64's digits) an int, beyond them a float as
    orjson makes them, ``inf`` past a double; Python's limit on digits is never reached."""
    return int(text) if len(text) <= 20 else float(text)


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def _hold_to_orjsons_rules(document: object) -> None:
    """ValueError if containers nest deeper than orjson allows, or a string (keys included)
    holds a lone surrogate (UnicodeEncodeError); a loop, since the document may be deep."""
    stack = [(document, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_DEPTH:
                raise ValueError("nested too deeply")
            children = [*item, *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
        elif isinstance(item, str):
            item.encode("utf-8")
