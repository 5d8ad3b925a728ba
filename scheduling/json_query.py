"""Nova's JsonFilter query grammar, evaluated against one host's attributes.

A query is a JSON list in prefix form: ``["and", [">=", "$free_ram_mb", 1024],
["not", "$service.disabled"]]``. The first element is a command; the rest are
arguments, each of which is

* a list: a sub-query, evaluated first (all of them: there is no short-circuit);
* a string starting with ``$``: a variable. ``$name.sub.key`` reads
  ``attributes["name"]["sub"]["key"]``. A variable that is missing, ``None``,
  or reached through a non-mapping resolves to nothing;
* the empty string: resolves to nothing, like a missing variable;
* anything else (other strings, numbers, booleans, objects): a literal.

Arguments that resolve to nothing are *dropped*, not compared, which is what
makes a missing variable fail a comparison (too few arguments) but vanish from
``and`` (``["and", "$missing"]`` is true).

Commands:

* ``=``, ``<``, ``>``, ``<=``, ``>=``: the first argument compared with every
  other one; false with fewer than two arguments, or when Python cannot order
  the values (say, a number and a string).
* ``in``: the first argument equals one of the others.
* ``and`` / ``or``: truthiness of all / any arguments.
* ``not``: a *list* with each argument negated. At the top of a query a list
  means "any of these is true"; nested inside another command it is just a
  value, and a non-empty list is truthy whatever it holds. Both are Nova's.

An empty query (``""``, ``[]``, or any JSON value that is false, such as ``{}``)
accepts every host.
"""

from __future__ import annotations

import json
import operator
import reprlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["InvalidQuery", "evaluate"]


class InvalidQuery(ValueError):
    """The query is not JSON, not a list, or uses an unknown command."""


_Value = bool | list[bool]


def _comparison(compare: Callable[[Any, Any], Any]) -> Callable[[list[Any]], _Value]:
    def run(args: list[Any]) -> _Value:
        if len(args) < 2:
            return False
        first = args[0]
        try:
            return all(compare(first, other) for other in args[1:])
        except TypeError:
            # Nova would raise here; an attribute of an unexpected type should
            # fail this host's check, not the whole request.
            return False

    return run


def _in(args: list[Any]) -> _Value:
    return len(args) >= 2 and args[0] in args[1:]


def _not(args: list[Any]) -> _Value:
    return [not arg for arg in args]


def _or(args: list[Any]) -> _Value:
    return any(args)


def _and(args: list[Any]) -> _Value:
    return all(args)


_COMMANDS: dict[str, Callable[[list[Any]], _Value]] = {
    "=": _comparison(operator.eq),
    "<": _comparison(operator.lt),
    ">": _comparison(operator.gt),
    "<=": _comparison(operator.le),
    ">=": _comparison(operator.ge),
    "in": _in,
    "not": _not,
    "or": _or,
    "and": _and,
}
_COMMAND_LIST = ", ".join(repr(name) for name in _COMMANDS)


def _lookup(text: str, attributes: Mapping[str, Any]) -> Any | None:
    if not text:
        return None
    if not text.startswith("$"):
        return text
    head, *rest = text[1:].split(".")
    node = attributes.get(head)
    for key in rest:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _run(query: list[Any], attributes: Mapping[str, Any], where: str) -> _Value:
    if not query:
        return True
    command = query[0]
    shown = reprlib.repr(command)
    if not isinstance(command, str):
        raise InvalidQuery(
            f"{where}[0]: expected a command name, got {type(command).__name__} {shown}"
        )
    method = _COMMANDS.get(command)
    if method is None:
        raise InvalidQuery(f"{where}[0]: unknown command {shown}; expected one of {_COMMAND_LIST}")
    args: list[Any] = []
    for index, raw in enumerate(query[1:], start=1):
        if isinstance(raw, list):
            arg: Any = _run(raw, attributes, f"{where}[{index}]")
        elif isinstance(raw, str):
            arg = _lookup(raw, attributes)
        else:
            arg = raw
        if arg is not None:
            args.append(arg)
    return method(args)


def evaluate(query: str | list[Any], attributes: Mapping[str, Any]) -> bool:
    """Return whether a host with these ``attributes`` passes the JsonFilter ``query``.

    ``query`` is JSON text or the already-decoded list. Raises
    :class:`InvalidQuery`, naming the offending position as ``query[i][j]``,
    when the text is not JSON, when a non-empty query is not a list, or when a
    command is unknown anywhere in it (every sub-query is evaluated, so an
    error cannot hide behind an ``or`` that is already true).
    """
    parsed: Any = query
    if isinstance(query, str):
        if not query:
            return True
        try:
            parsed = json.loads(query)
        except RecursionError as exc:
            raise InvalidQuery("query nests too deeply to decode") from exc
        except ValueError as exc:
            raise InvalidQuery(f"query is not valid JSON: {exc}") from exc
    if not parsed:
        return True
    if not isinstance(parsed, list):
        raise InvalidQuery(
            f"query must be a JSON list such as ['>=', '$free_ram_mb', 1024], "
            f"got {type(parsed).__name__} {reprlib.repr(parsed)}"
        )
    try:
        result = _run(parsed, attributes, "query")
    except RecursionError as exc:
        raise InvalidQuery("query nests too deeply to evaluate") from exc
    if isinstance(result, list):
        return any(result)
    return result
