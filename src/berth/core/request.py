"""A placement request (Nova's RequestSpec, reduced to what placement needs)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from berth.core.model import Name


class ImageProps(BaseModel):
    """Image properties the image-properties and traits filters read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    architecture: Name | None = None
    hypervisor_type: Name | None = None
    required_traits: tuple[Name, ...] = ()
    forbidden_traits: tuple[Name, ...] = ()


class RequestSpec(BaseModel):
    """What to place. Scheduler hints follow Nova's names (same_host, different_host, group)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    flavor: Name
    num_instances: Annotated[int, Field(ge=1, le=1000)] = 1
    availability_zone: Name | None = None
    image: ImageProps = ImageProps()
    server_group: Name | None = None
    same_host: tuple[Name, ...] = Field((), description="instance ids to share a host with")
    different_host: tuple[Name, ...] = Field((), description="instance ids to avoid")
    ignore_hosts: tuple[Name, ...] = Field((), description="hosts that already failed (retry)")
    project: Name = "default"
    instance_ids: tuple[Name, ...] | None = Field(
        None, description="ids for the new instances; generated from the seed when absent"
    )
    seed: int = 0

    def ids(self) -> tuple[str, ...]:
        if self.instance_ids is not None:
            return self.instance_ids
        return tuple(f"{self.flavor}-{self.seed}-{i}" for i in range(self.num_instances))
