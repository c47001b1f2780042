"""openstacksdk and keystoneauth exceptions as the driver interface's `CloudError` kinds."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from keystoneauth1 import exceptions as ksa
from openstack import exceptions as sdk

from berth.cloud.driver import CloudError, CloudErrorKind, Server

T = TypeVar("T")

NO_VALID_HOST = "No valid host"
"""The start of the fault Nova's scheduler leaves on a server it found no room for."""


def kind_of_status(status: int | None) -> CloudErrorKind:
    """An HTTP answer's kind: 404 is not found, other 4xx refused, 5xx or none unreachable.

    A 5xx leaves the outcome unknown (Nova may have acted), exactly what UNREACHABLE means.
    """
    if status == 404:
        return CloudErrorKind.NOT_FOUND
    if status is not None and 400 <= status < 500:
        return CloudErrorKind.REFUSED
    return CloudErrorKind.UNREACHABLE


def as_cloud_error(exc: Exception, what: str, server_id: str | None = None) -> CloudError:
    if isinstance(exc, sdk.NotFoundException):  # also the SDK's own "no such name" of find_*
        return CloudError(CloudErrorKind.NOT_FOUND, f"{what}: {exc.message}", server_id=server_id)
    if isinstance(exc, sdk.HttpException):
        status = exc.status_code
        detail = exc.details or exc.message
        return CloudError(kind_of_status(status), f"{what}: {status} {detail}", server_id=server_id)
    if isinstance(exc, (ksa.ConnectFailure, ksa.ConnectTimeout, ksa.DiscoveryFailure)):
        return CloudError(CloudErrorKind.UNREACHABLE, f"{what}: {exc}", server_id=server_id)
    return CloudError(
        CloudErrorKind.UNREACHABLE, f"{what}: {type(exc).__name__}: {exc}", server_id=server_id
    )


@contextmanager
def calling(what: str, server_id: str | None = None) -> Iterator[None]:
    """Run an SDK call; anything it raises leaves as a `CloudError` naming `what`."""
    try:
        yield
    except CloudError:
        raise
    except (sdk.SDKException, ksa.ClientException, OSError) as exc:
        raise as_cloud_error(exc, what, server_id) from exc


def fault_kind(server: Server) -> CloudErrorKind:
    """Why a server is in ERROR: the scheduler found no room (refused) or the build failed.

    Nova accepts a boot on a chosen host and only then checks the host (it goes ERROR with a
    "No valid host was found" fault): for Berth that is a refusal, and an alternate may fit.
    """
    if server.fault and server.fault.startswith(NO_VALID_HOST):
        return CloudErrorKind.REFUSED
    return CloudErrorKind.FAILED


def wrap(what: str, call: Callable[[], T], server_id: str | None = None) -> T:
    with calling(what, server_id):
        return call()
