"""Nova's servers and notifications as the interface's `Server` and changes (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from berth.cloud.driver import Change, HostChanged, Server, ServerChanged, ServerGone, ServerState

BERTH_NAME = "berth_instance"
"""Server metadata key holding the instance id Berth booted the server as."""
BERTH_PROJECT = "berth_project"

_STATUS = {
    "BUILD": ServerState.BUILDING,
    "ACTIVE": ServerState.ACTIVE,
    "MIGRATING": ServerState.MIGRATING,
    "RESIZE": ServerState.MIGRATING,
    "VERIFY_RESIZE": ServerState.MIGRATING,
    "REVERT_RESIZE": ServerState.MIGRATING,
    "SHUTOFF": ServerState.SHUTOFF,
    "PAUSED": ServerState.SHUTOFF,
    "SUSPENDED": ServerState.SHUTOFF,
    "SHELVED": ServerState.SHUTOFF,
    "SHELVED_OFFLOADED": ServerState.SHUTOFF,
    "ERROR": ServerState.ERROR,
    "DELETED": ServerState.DELETED,
    "SOFT_DELETED": ServerState.DELETED,
}
"""Nova's API status -> state; the rest (REBOOT, REBUILD, RESCUE, ...) run on their host."""

_VM_STATE = {
    "building": ServerState.BUILDING,
    "active": ServerState.ACTIVE,
    "stopped": ServerState.SHUTOFF,
    "paused": ServerState.SHUTOFF,
    "suspended": ServerState.SHUTOFF,
    "shelved": ServerState.SHUTOFF,
    "shelved_offloaded": ServerState.SHUTOFF,
    "resized": ServerState.MIGRATING,
    "error": ServerState.ERROR,
    "deleted": ServerState.DELETED,
    "soft-delete": ServerState.DELETED,
}
"""Nova's vm_state (notifications carry it, not the API status) -> state."""

_MOVING_TASKS = {"migrating", "resize_prep", "resize_migrating", "resize_migrated"}

SERVER_EVENTS = {
    "instance.update",
    "instance.create.end",
    "instance.create.error",
    "instance.live_migration_post_dest.end",
    "instance.live_migration_rollback.end",
    "instance.live_migration_rollback_dest.end",
    "instance.live_migration_abort.end",
    "instance.power_off.end",
    "instance.power_on.end",
    "instance.resize_finish.end",
    "instance.evacuate",
}
"""Notifications whose payload is the server as it now is. Left out on purpose: the `.start`
halves and `instance.live_migration_post.end`, which the source host sends after the
destination's `post_dest.end` and which still names the source host
(tests/openstack/recorded/notifications.json)."""
GONE_EVENTS = {"instance.delete.end"}
SERVICE_EVENTS = {"service.update", "service.create", "service.delete"}


def prefixed(prefix: str, host: str | None) -> str | None:
    return None if host is None else f"{prefix}{host}"


def state_of(status: str, task_state: str | None = None) -> ServerState:
    if status.upper() == "ACTIVE" and task_state in _MOVING_TASKS:
        return ServerState.MIGRATING
    return _STATUS.get(status.upper(), ServerState.ACTIVE)


def vm_state_of(vm_state: str, task_state: str | None = None) -> ServerState:
    state = _VM_STATE.get(vm_state, ServerState.ACTIVE)
    if state is ServerState.ACTIVE and task_state in _MOVING_TASKS:
        return ServerState.MIGRATING
    return state


def _project(metadata: Mapping[str, str], project: str | None) -> str:
    return metadata.get(BERTH_PROJECT) or project or "default"


def server_from_api(
    body: Mapping[str, Any], prefix: str, groups: Mapping[str, str] | None = None
) -> Server:
    """One server of GET /servers/detail (microversion ≥ 2.47: the flavor is embedded)."""
    metadata = {str(k): str(v) for k, v in (body.get("metadata") or {}).items()}
    fault = body.get("fault") or {}
    flavor = body.get("flavor") or {}
    group_ids = body.get("server_groups") or []
    group = group_ids[0] if group_ids else (groups or {}).get(body["id"])
    return Server(
        id=body["id"],
        name=body.get("name") or body["id"],
        host=prefixed(prefix, body.get("OS-EXT-SRV-ATTR:host")),
        flavor=flavor.get("original_name") or str(flavor.get("id", "")),
        state=state_of(body.get("status", "ACTIVE"), body.get("OS-EXT-STS:task_state")),
        project=_project(metadata, body.get("tenant_id")),
        server_group=group,
        metadata=metadata,
        fault=fault.get("message"),
    )


def _data(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("nova_object.data") or {}


def server_from_payload(payload: Mapping[str, Any], prefix: str) -> Server:
    """The server an instance notification's payload describes (InstanceActionPayload & co)."""
    data = _data(payload)
    metadata = {str(k): str(v) for k, v in (data.get("metadata") or {}).items()}
    fault = _data(data.get("fault"))
    return Server(
        id=data["uuid"],
        name=data.get("display_name") or data["uuid"],
        host=prefixed(prefix, data.get("host")),
        flavor=_data(data.get("flavor")).get("name", ""),
        state=vm_state_of(data.get("state", "active"), data.get("task_state")),
        project=_project(metadata, data.get("tenant_id")),
        metadata=metadata,
        fault=fault.get("exception_message") or fault.get("exception"),
    )


def change_of_notification(message: Mapping[str, Any], prefix: str) -> Change | None:
    """One versioned notification (oslo.messaging's `oslo.message`) as a change, or None."""
    event = message.get("event_type", "")
    payload = message.get("payload") or {}
    if event in GONE_EVENTS:
        data = _data(payload)
        return ServerGone(data["uuid"], data.get("display_name") or data["uuid"])
    if event in SERVER_EVENTS:
        return ServerChanged(server_from_payload(payload, prefix))
    if event in SERVICE_EVENTS:
        data = _data(payload)
        if data.get("binary") != "nova-compute":
            return None
        enabled = None if event == "service.delete" else not data.get("disabled", False)
        return HostChanged(f"{prefix}{data['host']}", enabled=enabled)
    return None
