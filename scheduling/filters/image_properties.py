"""Nova's ImagePropertiesFilter: the image's architecture, hypervisor and ABI."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from scheduling.extra_specs import address_bits_short
from scheduling.filters.base import Context, HostFilter, frozen
from scheduling.model import Aggregate, BoolArray, IntArray, Provider, Request

# Old spellings Nova still accepts, by the canonical name they map to.
_ARCH = {
    "i386": "i686",
    "i486": "i686",
    "i586": "i686",
    "x86_32": "i686",
    "x86_32p": "i686",
    "amd64": "x86_64",
}
_HV_TYPE = {"xapi": "xen"}
_VM_MODE = {"pv": "xen", "hv": "hvm", "baremetal": "hvm"}
_LEGACY_NAMES = {
    "architecture": "hw_architecture",
    "hypervisor_type": "img_hv_type",
    "vm_mode": "hw_vm_mode",
    "hypervisor_version_requires": "img_hv_requested_version",
}

_COMPARE: dict[str, Callable[[tuple[int, ...], tuple[int, ...]], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    ">=": operator.ge,
}
_CLAUSE = re.compile(r"\s*(<=|>=|==|!=|<|>)\s*([0-9]+(?:\.[0-9]+)*)\s*")

Version = tuple[int, ...]


def version_to_int(text: str) -> int:
    """Nova's integer encoding of a dotted version, three decimal digits per
    part: ``"6.0.1"`` -> 6000001. Parts above 999 would overlap: ValueError."""
    parts = [int(part) for part in text.split(".")]
    if any(not 0 <= part <= 999 for part in parts):
        raise ValueError(f"version part out of range in {text!r}")
    number = 0
    for part in parts:
        number = number * 1000 + part
    return number


def int_to_version(number: int) -> Version:
    """The parts of an encoded version: 6000001 -> (6, 0, 1), 6000 -> (6, 0)."""
    parts: list[int] = []
    while number > 0:
        number, part = divmod(number, 1000)
        parts.insert(0, part)
    return tuple(parts)


def parse_requirement(text: str) -> list[tuple[str, Version]] | None:
    """``">=6.0,<6.2"`` as comparisons, or None if it is not that grammar (each
    comma separated clause an operator and a dotted version)."""
    clauses: list[tuple[str, Version]] = []
    for clause in text.split(","):
        found = _CLAUSE.fullmatch(clause)
        if found is None:
            return None
        clauses.append((found[1], tuple(int(p) for p in found[2].split("."))))
    return clauses


def satisfies(version: Version, clauses: Sequence[tuple[str, Version]]) -> bool:
    """Whether ``version`` meets every clause; missing trailing parts are zero,
    so 6.0 == 6.0.0 as in the version predicates Nova uses."""
    for op, bound in clauses:
        width = max(len(version), len(bound))
        have = version + (0,) * (width - len(version))
        need = bound + (0,) * (width - len(bound))
        if not _COMPARE[op](have, need):
            return False
    return True


def _canonical(value: str | None, aliases: Mapping[str, str]) -> str | None:
    if not value:
        return None
    lowered = value.lower()
    return aliases.get(lowered, lowered)


def _supported(capabilities: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    reported = capabilities.get("supported_instances") or ()
    return [
        tuple(entry)
        for entry in reported
        if isinstance(entry, Sequence) and not isinstance(entry, str) and len(entry) == 3
    ]


def _agrees(wanted: tuple[str | None, ...], entry: tuple[Any, ...]) -> bool:
    return all(w is None or w == s for w, s in zip(wanted, entry, strict=True))


class ImagePropertiesFilter(HostFilter):
    """An image naming ``hw_architecture``, ``img_hv_type`` or ``hw_vm_mode``
    needs a provider whose ``supported_instances`` has an (arch, hv_type,
    vm_mode) entry agreeing on every named one; a provider reporting none
    fails. Only then is ``img_hv_requested_version`` (``">=6.0,<6.2"``)
    checked against the integer ``hypervisor_version``, and only if the host
    reports one. ``hw_maxphysaddr_bits`` needs as many physical address bits
    in the host CPU's ``cpu_info`` (``maxphysaddr.bits``).
    ``default_architecture`` stands in for an image without
    ``hw_architecture`` (Nova's ``image_properties_default_architecture``)."""

    name = "ImagePropertiesFilter"
    cost = 5
    static = True

    def group_key(self, provider: Provider, aggregates: Mapping[str, Aggregate]) -> Hashable:
        return frozen(provider.capabilities)

    def __init__(self, default_architecture: str | None = None) -> None:
        self.default_architecture = default_architecture
        self._known: tuple[object, dict[tuple[tuple[str, str], ...], BoolArray]] | None = None
        """(providers, image properties -> the rows that pass) of the last
        snapshot, which its usage-only twins share: images are few."""

    def mask(self, ctx: Context, rows: IntArray) -> BoolArray:
        snapshot = ctx.snapshot
        known = self._known
        if known is None or known[0] is not snapshot.providers:
            known = self._known = (snapshot.providers, {})
        image = tuple(sorted(ctx.request.image_properties.items()))
        passing = known[1].get(image)
        if passing is None:
            passing = np.fromiter(
                (self.reject(ctx, row) is None for row in range(snapshot.size)),
                np.bool_,
                snapshot.size,
            )
            known[1][image] = passing
        taken: BoolArray = passing.take(rows)
        return taken

    def applies(self, request: Request) -> bool:
        return bool(request.image_properties) or bool(self.default_architecture)

    def reject(self, ctx: Context, row: int) -> str | None:
        props = {_LEGACY_NAMES.get(k, k): v for k, v in ctx.request.image_properties.items()}
        bits = props.get("hw_maxphysaddr_bits")
        if bits is not None:
            short = address_bits_short(
                ctx.snapshot.providers[row].capabilities, bits, "hw_maxphysaddr_bits"
            )
            if short is not None:
                return short
        wanted = (
            _canonical(props.get("hw_architecture", self.default_architecture), _ARCH),
            _canonical(props.get("img_hv_type"), _HV_TYPE),
            _canonical(props.get("hw_vm_mode"), _VM_MODE),
        )
        # Like Nova, a version requirement alone constrains nothing.
        if not any(wanted):
            return None
        capabilities = ctx.snapshot.providers[row].capabilities
        supported = _supported(capabilities)
        if not supported:
            return "reports no supported_instances"
        # Position by position: Nova tests membership in the whole tuple, which
        # lets vm_mode "xen" match a host whose hypervisor type is xen.
        if not any(_agrees(wanted, entry) for entry in supported):
            asked = "/".join(w or "*" for w in wanted)
            return f"no supported instance matches {asked}"
        return self._version(props.get("img_hv_requested_version"), capabilities)

    @staticmethod
    def _version(requirement: str | None, capabilities: Mapping[str, Any]) -> str | None:
        number = capabilities.get("hypervisor_version")
        # Nova skips the check when the host reports no (or a zero) version.
        if not requirement or not isinstance(number, int) or isinstance(number, bool):
            return None
        if number <= 0:
            return None
        clauses = parse_requirement(requirement)
        if clauses is None:
            return f"img_hv_requested_version {requirement!r} is not understood"
        version = int_to_version(number)
        if satisfies(version, clauses):
            return None
        shown = ".".join(map(str, version))
        return f"hypervisor version {shown} does not satisfy {requirement!r}"
