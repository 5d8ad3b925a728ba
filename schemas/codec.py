"""Bytes <-> events, with errors a person can act on."""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter, ValidationError

from schemas.events import NEWEST_SCHEMA_VERSION, Event

_EVENT: TypeAdapter[Event] = TypeAdapter(Event)
# the adapter's core validator, called without the adapter's Python wrapper:
# 0.3-0.5 us of the 3-4 us a claim takes, on every record a writer reads
_VALIDATE_JSON = _EVENT.validator.validate_json


class EventDecodeError(ValueError):
    """A record that is not a valid event; ``reason`` says why in one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _summary(error: ValidationError) -> str:
    parts = []
    errors = error.errors(include_url=False)
    deeper = {item["loc"][:-1] for item in errors if item["loc"]}
    for item in errors:
        if item["type"] == "too_short" and any(
            loc[: len(item["loc"])] == item["loc"] for loc in deeper
        ):
            continue  # pydantic's echo of an item that failed; the item's error says it

        where = ".".join(str(p) for p in item["loc"]) or "event"
        version = item.get("input")
        if (
            item["loc"]
            and item["loc"][-1] == "schema_version"
            and isinstance(version, int)
            and version > NEWEST_SCHEMA_VERSION
        ):
            parts.append(
                f"{where}: version {version} is newer than this build understands "
                f"(newest is {NEWEST_SCHEMA_VERSION}); upgrade Berth before producing it"
            )
            continue
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


def decode_event(raw: bytes | str) -> Event:
    """Parse and validate one event from JSON; :class:`EventDecodeError` if invalid."""
    try:
        event: Event = _VALIDATE_JSON(raw)
    except ValidationError as error:
        return _raise(error)
    return event


def validate_event(data: dict[str, Any]) -> Event:
    """Validate an event given as a Python mapping (as a client builds it)."""
    try:
        return _EVENT.validate_python(data, strict=False)
    except ValidationError as error:
        return _raise(error)


def _raise(error: ValidationError) -> Event:
    raise EventDecodeError(_summary(error)) from None


def encode_event(event: Event) -> bytes:
    """Compact JSON of an event: defaults are omitted to keep the log small,
    except the type tag, which goes first because decoding dispatches on it."""
    body = event.model_dump_json(exclude_defaults=True)
    return f'{{"type":"{event.type}",{body[1:]}'.encode()
