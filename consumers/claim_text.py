"""A scheduler's claim written out as the log records it, without its model.

The scheduler proposes a claim for every instance it places: building the
pydantic ``Claim`` (and its ``ClaimItem``) validates what was validated
already (the request's fields at the edge, the provider's id when it
registered) and costs more than a bounded decision's weighing. For the
common claim (one provider, no NUMA fit, no tags) the text is written here
directly, the same bytes ``encode_event`` gives the model (compact JSON, the
model's field order, defaults left out, strings escaped as pydantic's JSON
escapes them). Anything else, and any identifier the model would refuse
(too long), goes through the model, which says what is wrong as before.
"""

from __future__ import annotations

from json.encoder import encode_basestring as _quoted

from ledger.publisher import Encoded
from schemas.events import DEFAULT_LEASE_MS
from schemas.requests import PlacementRequest

_MAX_IDENTIFIER = 255
"""``schemas.events.Identifier``'s longest."""


def claim_text(r: PlacementRequest, instance: int, provider_id: str, suffix: str) -> Encoded | None:
    """``encode_event`` of the claim of ``r``'s ``instance`` on
    ``provider_id`` (attempt and generation ``suffix``) that
    ``consumers.scheduler`` makes without a fit; None when it has tags
    or an id the model would refuse (the model then decides)."""
    if r.tags or r.require_with_tags or r.require_without_tags:
        return None  # sets: encoded in the model's own order
    event_id = f"claim-{r.request_id}-{instance}-{suffix}"
    reservation_id = f"{r.request_id}.{instance}.{suffix}"
    if len(event_id) > _MAX_IDENTIFIER or len(reservation_id) > _MAX_IDENTIFIER:
        return None
    if not 0 < len(provider_id) <= _MAX_IDENTIFIER:
        return None
    pid = _quoted(provider_id)
    amounts = ",".join([f"{_quoted(rc)}:{amount}" for rc, amount in r.resources.items()])
    text = [
        '{"type":"claim","reservation_id":',
        _quoted(reservation_id),
        ',"consumer_id":',
        _quoted(f"{r.request_id}.{instance}"),
        ',"project_id":',
        _quoted(r.project_id),
        ',"items":[{"provider_id":',
        pid,
        ',"resources":{',
        amounts,
        "}}]",
    ]
    if r.lease_ms != DEFAULT_LEASE_MS:
        text.append(f',"lease_ms":{r.lease_ms}')
    if r.group_policy == "anti-affinity" and r.group_id is not None:
        text += [',"anti_affinity_group":', _quoted(r.group_id)]
    text += [',"event_id":', _quoted(event_id), f',"ts_ms":{r.ts_ms},"partition_key":', pid, "}"]
    return Encoded(event_id, r.ts_ms, provider_id, "".join(text).encode())
