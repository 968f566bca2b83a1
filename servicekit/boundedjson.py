"""JSON from a peer, decoded with a bound on what it may build.

``json.loads`` builds every value of a document before the caller can look at it, and a small
document can build a large heap: ``[{},{},...]`` is 3 bytes per dict of 64 bytes, so 32 MB of it
is 700 MB of objects.  Size caps on the bytes alone do not bound that.

``loads_bounded(body, max_values)`` first counts, at C speed, an upper bound of the values the
document can build (every value but the first in an array or object is preceded by a comma, and
every array or object opens with a bracket: ``body.count(b",") + body.count(b"{") +
body.count(b"[") + 1``; commas and brackets inside strings are counted too, so the bound is never
low) and refuses a document over ``max_values`` with :class:`TooLarge` before parsing a byte of it.
``max_containers`` bounds the objects and arrays alone (``body.count(b"{") + body.count(b"[")``):
they are the costliest values (a dict is some 200 bytes), so a document may hold many scalars but
only as many containers as a real one needs.  The values a document under the bounds builds cost a
bounded amount each, plus the string bytes, which the caller's cap on the body's size bounds.

:class:`NotJson` covers everything else a hostile body provokes in the decoder: bytes that are not
UTF-8, syntax errors, nesting deeper than the interpreter's recursion limit, integers longer than
Python converts.
"""

from __future__ import annotations

import json
from typing import Any


class TooLarge(ValueError):
    """The document could build more values than allowed (or is longer than allowed)."""


class NotJson(ValueError):
    """The body is not a JSON document this decoder accepts."""


def value_bound(body: bytes | str) -> int:
    """An upper bound of the values ``json.loads(body)`` builds (see the module doc)."""
    if isinstance(body, str):
        return body.count(",") + body.count("{") + body.count("[") + 1
    return body.count(b",") + body.count(b"{") + body.count(b"[") + 1


def container_bound(body: bytes | str) -> int:
    """An upper bound of the objects and arrays ``json.loads(body)`` builds."""
    if isinstance(body, str):
        return body.count("{") + body.count("[")
    return body.count(b"{") + body.count(b"[")


def check_bound(body: bytes | str, max_values: int, max_bytes: int | None = None,
                max_containers: int | None = None) -> None:
    """:class:`TooLarge` when ``body`` is longer than ``max_bytes`` or may build more than ``max_values``
    values or ``max_containers`` objects and arrays."""
    if max_bytes is not None and len(body) > max_bytes:
        raise TooLarge(f"{len(body)} bytes, more than the {max_bytes} allowed")
    bound = value_bound(body)
    if bound > max_values:
        raise TooLarge(f"up to {bound} JSON values, more than the {max_values} allowed")
    if max_containers is not None:
        containers = container_bound(body)
        if containers > max_containers:
            raise TooLarge(f"up to {containers} JSON objects and arrays, more than the {max_containers} allowed")


def loads_bounded(body: bytes | str, max_values: int, max_bytes: int | None = None,
                  max_containers: int | None = None) -> Any:
    """``json.loads(body)``, refused with :class:`TooLarge` over the bounds and :class:`NotJson` when
    it does not decode (see the module doc)."""
    check_bound(body, max_values, max_bytes, max_containers)
    try:
        return json.loads(body)
    except RecursionError:
        raise NotJson("nested too deeply to decode") from None
    except UnicodeDecodeError as e:
        raise NotJson(f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise NotJson(f"not JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    except ValueError as e:  # an integer over the interpreter's digit limit, and the like
        raise NotJson(f"not acceptable JSON ({' '.join(str(e).split())[:120]})") from None
