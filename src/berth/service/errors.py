"""API errors: a stable machine-readable code, a human message, the field at fault if any.

Every error body has the same shape::

    {"error": {"code": "no_valid_host", "message": "0/270 hosts fit: ...", "field": null,
               "details": {...}}}
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


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


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "missing or unknown bearer token"},
    403: {"model": ErrorBody, "description": "the token's role does not allow this"},
    422: {"model": ErrorBody, "description": "bad input; `field` names it"},
}
