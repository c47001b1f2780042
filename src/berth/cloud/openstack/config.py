"""How Berth reaches one OpenStack cluster: endpoints, credentials, notifications (validated)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from berth.core.model import is_ident

COMPUTE_MICROVERSION = "2.96"
"""Nova's API version the driver speaks: ≥ 2.74 boots on a chosen host, 2.47 embeds the flavor
in a server, 2.53 names services and hypervisors by UUID, 2.61 embeds flavors' extra specs."""
PLACEMENT_MICROVERSION = "1.39"


class OpenStackConfig(BaseModel):
    """One cluster. `auth` is handed to keystoneauth as it is (docs/openstack.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster: str = Field(description="Berth's name for the cluster")
    compute: str = Field(description="Nova's endpoint, e.g. http://nova:8774/v2.1")
    placement: str = Field(description="Placement's endpoint")
    image: str | None = Field(None, description="Glance's endpoint (when not in the catalog)")
    auth_type: str = "admin_token"
    auth: dict[str, str] = Field(default_factory=dict)
    region: str | None = None
    boot_image: str | None = Field(None, description="image id booted when a request names none")
    transport_url: str | None = Field(
        None, description="RabbitMQ URL of Nova's notifications; None: poll changes-since"
    )
    notification_exchange: str = "nova"
    notification_topic: str = "versioned_notifications"
    host_prefix: str | None = Field(
        None,
        description="prefix of Berth's host names (default '<cluster>.'): unique across clusters",
    )
    timeout: float = Field(30.0, gt=0, description="seconds for one API call")

    @field_validator("cluster")
    @classmethod
    def _cluster_ident(cls, value: str) -> str:
        if not is_ident(value):
            raise ValueError("must be letters, digits and ._:@-, starting with a letter or digit")
        return value

    @field_validator("compute", "placement", "image")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/") if value else value

    @property
    def prefix(self) -> str:
        return f"{self.cluster}." if self.host_prefix is None else self.host_prefix

    @classmethod
    def from_stack(cls, entry: Mapping[str, Any], **overrides: Any) -> OpenStackConfig:
        """A cluster described by scripts/ensure-openstack.sh (one entry of clusters.json)."""
        values: dict[str, Any] = {
            "cluster": entry["name"],
            "compute": entry["compute"],
            "placement": entry["placement"],
            "image": entry.get("image"),
            "auth": {"endpoint": entry["compute"], "token": entry["token"]},
            "boot_image": entry.get("image_id"),
            "transport_url": entry.get("transport_url"),
            "notification_exchange": entry.get("notification_exchange", "nova"),
            "notification_topic": entry.get("notification_topic", "versioned_notifications"),
        }
        values.update(overrides)
        return cls(**values)
