"""The placement scriptlet: an operator's own placement rule in Starlark, run
after the filters and weighers (LXD's instance placement scriptlet).

The program defines ``instance_placement(request, candidates)``. It is
called once per instance with the request (a struct, read as
``request.name``, as LXD's is: ids, the instance's ``name``, ``reason``
(``new``, ``evacuation`` or ``relocation``, given by the request or by a
balance plan's moves, see :mod:`scheduling.balance`), ``project``, resources,
which instance of how many, zone, server group, flavor, extra specs, image
properties, traits, hints) and the providers that passed every filter, best
weighed first (a list of dicts with ``provider_id``, LXD's ``server_name``
(the same id) and ``weight``; the best ``max_candidates`` of them, since
handing a program thousands costs milliseconds a pick). It may call
``set_target(provider_id)`` to pick one of them instead of the engine's
first; returning anything but ``None`` refuses the request with that value
as the reason. The functions it is given only read the snapshot the engine
decides on:

- ``get_provider_resources(provider_id)``: per resource class ``total``,
  ``reserved``, ``capacity`` (``(total - reserved) x allocation_ratio``),
  ``used`` (with what earlier instances of the request took) and ``free``;
- ``get_provider_state(provider_id)``: state, availability zone, traits,
  aggregates, metrics, instances, host and metadata;
- ``get_instance_resources()``: what one instance asks for;
- ``log_info``, ``log_warn``, ``log_error`` (``*messages``);

and Starlark's ``json`` module.

Starlark has no clock, no randomness, no I/O and no unbounded loops, so the
engine stays a pure function of its inputs. The program is compiled once,
when the configuration is loaded, and a bad one is refused then (a syntax
error, no entry point, or one that cannot take two arguments). A loop that
runs too long is cancelled after a fixed number of the interpreter's
checks (about a thousand loop iterations each), a count, not a time, so the
same inputs always end the same way; a cancelled or failing call refuses
the request with the error.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import starlark

from scheduling.filters.base import Context
from scheduling.model import FloatArray, IntArray
from scheduling.weighers.combine import best_positions

_log = logging.getLogger("berth.scriptlet")

ENTRY = "instance_placement"

# The arguments go in as one JSON document that Starlark decodes natively:
# starlark-pyo3 converts a list of dicts value by value, about three times
# slower (150 us against 50 us for three candidates, 1.2 ms against 0.5 ms
# for a hundred). A name with a leading underscore would not be exported.
_CALL = "berth_call__"
_PRELUDE = f"""
def {_CALL}(arguments):
    given = json.decode(arguments)
    return {ENTRY}(struct(**given["request"]), given["candidates"])
"""


class ScriptletError(ValueError):
    """A program that cannot be used; the message says where and why."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the scriptlet made of one instance's candidates."""

    position: int | None = None
    """The position, among the engine's candidates, of the provider it chose
    with ``set_target``; None for the engine's pick."""
    refusal: str | None = None
    """Why it refused the request (its return value, or its error)."""


class HostCallError(Exception):
    """A host function's answer to a call it cannot serve (an unknown
    provider, a target that is not a candidate); the program's call fails
    with it."""


class _Call:
    """What the host functions read during one call of the program."""

    __slots__ = ("candidates", "ctx", "target")

    def __init__(self, ctx: Context, positions: dict[int, int]) -> None:
        self.ctx = ctx
        self.candidates = positions
        """Snapshot row -> position in the engine's candidates, of those shown."""
        self.target: int | None = None
        """The position ``set_target`` chose."""


class Scriptlet:
    """A compiled placement program; :meth:`decide` once per instance.

    Not for concurrent use: the host functions read the call in progress.
    """

    def __init__(
        self,
        source: str,
        name: str = "placement.star",
        max_checks: int = 1_000,
        max_candidates: int = 100,
    ) -> None:
        if max_checks < 1 or max_candidates < 1:
            raise ScriptletError("max_checks and max_candidates must be at least 1")
        self.name = name
        self.max_checks = max_checks
        self.max_candidates = max_candidates
        self._call: _Call | None = None
        module = starlark.Module()
        for function_name, function in self._host_functions().items():
            module.add_callable(function_name, function)
        library = starlark.Globals.extended_by(
            [starlark.LibraryExtension.Json, starlark.LibraryExtension.StructType]
        )
        dialect = starlark.Dialect.standard()
        try:
            starlark.eval(module, starlark.parse(name, source, dialect), library)
        except starlark.StarlarkError as error:
            raise ScriptletError(f"{name}: {_first_lines(error)}") from None
        try:
            kind = starlark.eval(module, starlark.parse("<check>", f"type({ENTRY})"), library)
        except starlark.StarlarkError:
            kind = None
        if kind != "function":
            raise ScriptletError(f"{name}: defines no {ENTRY}(request, candidates) function")
        _check_arity(source, name, dialect, library)
        starlark.eval(module, starlark.parse("<berth>", _PRELUDE, dialect), library)
        self._program = module.freeze()

    def decide(self, ctx: Context, candidates: IntArray, scores: FloatArray) -> Verdict:
        """Run the program on ``candidates`` (snapshot rows, weighed
        ``scores``), shown best first, for the next instance of ``ctx``'s
        request."""
        order = best_positions(scores, self.max_candidates).tolist()
        rows = candidates[order].tolist()
        call = self._call = _Call(ctx, dict(zip(rows, order, strict=True)))
        checks = 0

        def cancel() -> bool:
            nonlocal checks
            checks += 1
            return checks > self.max_checks

        providers = ctx.snapshot.providers
        arguments = json.dumps(
            {
                "request": _request(ctx, len(ctx.picked)),
                "candidates": [
                    {
                        "provider_id": providers[row].provider_id,
                        "server_name": providers[row].provider_id,
                        "weight": weight,
                    }
                    for row, weight in zip(rows, scores[order].tolist(), strict=True)
                ],
            }
        )
        try:
            result = self._program.call_with(
                starlark.EvalOptions(check_cancelled=cancel), _CALL, arguments
            ).value
        except starlark.StarlarkError as error:
            return Verdict(refusal=f"{self.name}: {_first_lines(error)}")
        finally:
            self._call = None
        if result is not None:
            return Verdict(refusal=str(result))
        return Verdict(position=call.target)

    def _host_functions(self) -> dict[str, Any]:
        return {
            "set_target": self._set_target,
            "get_provider_resources": self._provider_resources,
            "get_provider_state": self._provider_state,
            "get_instance_resources": self._instance_resources,
            "log_info": lambda *messages: self._logged(logging.INFO, messages),
            "log_warn": lambda *messages: self._logged(logging.WARNING, messages),
            "log_error": lambda *messages: self._logged(logging.ERROR, messages),
        }

    def _current(self) -> _Call:
        if self._call is None:
            raise HostCallError("only instance_placement may call the placement functions")
        return self._call

    def _row(self, provider_id: object) -> int:
        row = self._current().ctx.snapshot.row_of.get(str(provider_id))
        if row is None:
            raise HostCallError(f"unknown provider {provider_id!r}")
        return row

    def _set_target(self, provider_id: object) -> None:
        call = self._current()
        position = call.candidates.get(self._row(provider_id))
        if position is None:
            raise HostCallError(f"set_target: {provider_id!r} is not one of the candidates")
        call.target = position

    def _provider_resources(self, provider_id: object) -> dict[str, dict[str, int]]:
        ctx = self._current().ctx
        row = self._row(provider_id)
        snapshot = ctx.snapshot
        capacity = snapshot.capacity_table()[row]
        out = {}
        for column, rc in enumerate(snapshot.classes):
            total = int(snapshot.total[row, column])
            if total == 0:
                continue  # a class the provider has no inventory of
            used = ctx.used_at(row, column)
            out[rc] = {
                "total": total,
                "reserved": int(snapshot.reserved[row, column]),
                "capacity": int(capacity[column]),
                "used": used,
                "free": int(capacity[column]) - used,
            }
        return out

    def _provider_state(self, provider_id: object) -> dict[str, Any]:
        provider = self._current().ctx.snapshot.providers[self._row(provider_id)]
        return {
            "provider_id": provider.provider_id,
            "host": provider.host,
            "state": provider.state,
            "availability_zone": provider.availability_zone,
            "traits": sorted(provider.traits),
            "aggregates": sorted(provider.aggregates),
            "metrics": dict(provider.metrics),
            "instances": len(provider.instances),
            "metadata": dict(provider.metadata),
        }

    def _instance_resources(self) -> dict[str, int]:
        return dict(self._current().ctx.request.resources)

    def _logged(self, level: int, messages: tuple[object, ...]) -> None:
        call = self._current()
        _log.log(
            level,
            "%s (request %s): %s",
            self.name,
            call.ctx.request.request_id,
            "".join(str(m) for m in messages),
        )


def _request(ctx: Context, instance: int) -> dict[str, Any]:
    request = ctx.request
    hints = request.hints
    return {
        "request_id": request.request_id,
        "name": request.name,
        "reason": request.reason,
        "project": request.project_id,
        "project_id": request.project_id,
        "user_id": request.user_id,
        "flavor_name": request.flavor_name,
        "resources": dict(request.resources),
        "num_instances": request.num_instances,
        "instance": instance,
        "availability_zone": request.availability_zone,
        "group_id": request.group_id,
        "group_policy": request.group_policy,
        "extra_specs": dict(request.extra_specs),
        "image_properties": dict(request.image_properties),
        "required_traits": sorted(request.required_traits),
        "forbidden_traits": sorted(request.forbidden_traits),
        "hints": {
            "same_host": sorted(hints.same_host),
            "different_host": sorted(hints.different_host),
            "build_near_host_ip": hints.build_near_host_ip,
            "cidr": hints.cidr,
            "query": hints.query,
        },
    }


_PROBE = "berth_probe__"


def _check_arity(source: str, name: str, dialect: Any, library: Any) -> None:
    """Refuse an entry point that cannot take (request, candidates) now,
    rather than at the first request it would fail: Starlark's type checker
    reads a call of it that is never run."""
    text = source if source.endswith("\n") else source + "\n"
    first_probe_line = len(text.splitlines())  # the checker counts lines from 0
    probe = f"\ndef {_PROBE}():\n    return {ENTRY}({{}}, [])\n"
    try:
        errors, _, _ = starlark.parse(name, text + probe, dialect).typecheck(library, {})
    except starlark.StarlarkError:
        return  # what the checker cannot read, the interpreter still reports when it runs
    for error in errors:
        if error.span is not None and error.span.span.begin.line >= first_probe_line:
            message = str(error).splitlines()[0].removeprefix("error: ")
            raise ScriptletError(
                f"{name}: {ENTRY} must take two parameters (request, candidates): {message}"
            )


def _first_lines(error: Exception) -> str:
    """Starlark's message without its traceback and source excerpt: the
    error and where ("error: ... --> placement.star:3:5")."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    kept = [line.strip() for line in lines if line.startswith(("error:", " -->"))]
    return " ".join(kept or lines[:1]).replace(f"{HostCallError.__name__}: ", "")
