"""API errors: the JSON error body, and the one table from an exception to its HTTP status.

Every error body has the same shape::

    {"error": {"code": "no_valid_host", "message": "0/270 hosts fit: ...", "field": null,
               "details": {...}}}

A route raises `ApiError` when it knows the status itself; every other exception is turned into
one by `ERROR_STATUS` (an error class of the core, the store or the replica) or by the converter
of its kind in `CONVERTERS`, and `install_handlers` registers one handler per kind.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from berth.core.errors import BerthError, FleetError, SpecError
from berth.service.clouds.errors import BootFailedError, ClaimRefusedError, CloudUnavailableError
from berth.service.placing.errors import BadRequestError, ContentionError, NoPlacementError
from berth.store.errors import (
    AlreadyExistsError,
    InUseError,
    InvalidReferenceError,
    NotFoundError,
    StoreError,
)

log = logging.getLogger("berth.service")


class ErrorInfo(BaseModel):
    code: str
    message: str
    field: str | None = None
    details: dict[str, Any] | None = None


class ErrorBody(BaseModel):
    error: ErrorInfo


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        field: str | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.details = details
        self.headers = headers

    def body(self) -> dict[str, Any]:
        info = ErrorInfo(
            code=self.code, message=self.message, field=self.field, details=self.details
        )
        return {"error": info.model_dump()}


def bad_input(field: str, message: str) -> ApiError:
    return ApiError(422, "invalid_input", f"{field}: {message}", field=field)


def not_found(kind: str, name: str) -> ApiError:
    return ApiError(404, "not_found", f"{kind} {name!r} not found")


def policy_not_configured() -> ApiError:
    return ApiError(
        409,
        "policy_not_configured",
        "this service runs without a multi-cloud policy (berth serve --policy FILE)",
    )


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "missing or unknown bearer token"},
    403: {"model": ErrorBody, "description": "the token's role does not allow this"},
    422: {"model": ErrorBody, "description": "bad input; `field` names it"},
}

RETRY_SOON = {"Retry-After": "1"}


# ---------------------------------------------------------------------------- the table
@dataclass(frozen=True)
class ErrorRule:
    """How one error class answers: its status, its code (None: the error's own `code`), and
    whether the body names the error's `field`, carries its `details` or asks for a retry."""

    status: int
    code: str | None = None
    field: bool = False
    details: Callable[[Any], dict[str, Any]] | None = None
    headers: dict[str, str] | None = None


def _no_placement_details(exc: NoPlacementError) -> dict[str, Any]:
    return {"reason": exc.reason, **exc.details}


ERROR_STATUS: dict[type[BerthError], ErrorRule] = {
    NotFoundError: ErrorRule(404, "not_found"),
    AlreadyExistsError: ErrorRule(409, "already_exists"),
    InvalidReferenceError: ErrorRule(422, "invalid_reference", field=True),
    InUseError: ErrorRule(409, "in_use"),
    BadRequestError: ErrorRule(422, field=True),
    NoPlacementError: ErrorRule(409, "no_valid_host", details=_no_placement_details),
    ContentionError: ErrorRule(409, "contention", headers=RETRY_SOON),
    BootFailedError: ErrorRule(409, "boot_failed", details=lambda exc: exc.details),
    ClaimRefusedError: ErrorRule(409, "claim_refused"),
    CloudUnavailableError: ErrorRule(502, "cloud_unavailable"),
    SpecError: ErrorRule(422, "invalid_input"),
    FleetError: ErrorRule(422, "invalid_input"),
    StoreError: ErrorRule(409),
    BerthError: ErrorRule(422, "invalid_input"),
}
"""Error class -> answer; an error takes the entry of its nearest class (its own, else the
closest base class listed)."""

HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}
"""Routing errors' status -> code; any other status is `http_error`."""


# ---------------------------------------------------------------------------- converters
def from_berth_error(exc: BerthError) -> ApiError:
    rule = next(ERROR_STATUS[k] for k in type(exc).__mro__ if k in ERROR_STATUS)
    return ApiError(
        rule.status,
        rule.code if rule.code is not None else exc.code,  # type: ignore[attr-defined]
        str(exc),
        field=exc.field if rule.field else None,  # type: ignore[attr-defined]
        details=rule.details(exc) if rule.details is not None else None,
        headers=dict(rule.headers) if rule.headers is not None else None,
    )


def _field(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def from_validation(exc: RequestValidationError) -> ApiError:
    errors = exc.errors()
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    where = _field(tuple(first.get("loc", ())))
    msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    return ApiError(422, "invalid_input", f"{where}: {msg}" if where else msg, field=where or None)


def from_http(exc: StarletteHTTPException) -> ApiError:
    code = HTTP_CODES.get(exc.status_code, "http_error")
    return ApiError(exc.status_code, code, str(exc.detail))


def from_database(exc: DBAPIError) -> ApiError:
    if exc.connection_invalidated or isinstance(exc, OperationalError | InterfaceError):
        log.warning("database unavailable: %s", exc)
        return ApiError(
            503,
            "database_unavailable",
            "the database is unavailable; retry (with the same Idempotency-Key)",
            headers=dict(RETRY_SOON),
        )
    log.exception("database error")
    return ApiError(500, "internal_error", f"database error: {exc.orig}")


def from_unexpected(exc: Exception) -> ApiError:
    log.exception("unexpected error")
    return ApiError(500, "internal_error", f"unexpected error: {exc}")


CONVERTERS: tuple[tuple[type[Exception], Callable[[Any], ApiError]], ...] = (
    (ApiError, lambda exc: exc),
    (BerthError, from_berth_error),
    (RequestValidationError, from_validation),
    (StarletteHTTPException, from_http),
    (DBAPIError, from_database),
    (Exception, from_unexpected),
)
"""Each kind of exception the app answers, with what turns it into an `ApiError`."""


def error_response(exc: ApiError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


def install_handlers(app: FastAPI) -> None:
    """One exception handler per kind in `CONVERTERS`."""
    for kind, convert in CONVERTERS:
        app.add_exception_handler(kind, _handler(convert))


def _handler(
    convert: Callable[[Any], ApiError],
) -> Callable[[Request, Any], Any]:
    async def handle(_req: Request, exc: Any) -> JSONResponse:
        return error_response(convert(exc))

    return handle
