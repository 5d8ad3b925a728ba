"""Placement's error body: ``{"errors": [{status, title, detail, code (from
1.23), request_id}]}``, the detail as upstream's web framework words it
(its explanation of the status, then the message)."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

DEFAULT = "placement.undefined_code"
INVENTORY_INUSE = "placement.inventory.inuse"
CONCURRENT_UPDATE = "placement.concurrent_update"
DUPLICATE_NAME = "placement.duplicate_name"
PROVIDER_IN_USE = "placement.resource_provider.inuse"
PROVIDER_CANNOT_DELETE_PARENT = "placement.resource_provider.cannot_delete_parent"
RESOURCE_PROVIDER_NOT_FOUND = "placement.resource_provider.not_found"
ILLEGAL_DUPLICATE_QUERYPARAM = "placement.query.duplicate_key"
QUERYPARAM_BAD_VALUE = "placement.query.bad_value"
QUERYPARAM_MISSING_VALUE = "placement.query.missing_value"

_EXPLANATIONS = {
    400: "The server could not comply with the request since it is either malformed "
    "or otherwise incorrect.",
    401: "This server could not verify that you are authorized to access the document "
    "you requested.",
    403: "Access was denied to this resource.",
    404: "The resource could not be found.",
    405: "The method is not allowed for this resource.",
    406: "The resource could not be generated that was acceptable to your browser.",
    409: "There was a conflict when trying to complete your request.",
    415: "The request media type is not supported by this server.",
}


class PlacementError(Exception):
    """An answer other than success, as Placement gives it."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str = DEFAULT,
        headers: dict[str, str] | None = None,
        explain: bool = True,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = headers or {}
        self.explain = explain

    def body(self, with_code: bool, request_id: str | None) -> dict[str, Any]:
        explanation = _EXPLANATIONS.get(self.status, "") if self.explain else ""
        # webob's plain-text body turns the message's own line breaks into spaces
        flat = self.message.replace("\n", " ").replace("\r", "")
        detail = f"{explanation}\n\n {flat}  " if explanation else self.message
        error: dict[str, Any] = {
            "status": self.status,
            "title": HTTPStatus(self.status).phrase,
            "detail": detail,
        }
        if with_code:
            error["code"] = self.code
        if request_id is not None:
            error["request_id"] = request_id
        return {"errors": [error]}


def bad_request(message: str, code: str = DEFAULT) -> PlacementError:
    return PlacementError(400, message, code)


def not_found(message: str, code: str = DEFAULT) -> PlacementError:
    return PlacementError(404, message, code)


def conflict(message: str, code: str = DEFAULT) -> PlacementError:
    return PlacementError(409, message, code)
