"""The catalogue tenants choose from: flavors, images and networks (IP pools)."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.exc import IntegrityError

from berth.core.model import Flavor
from berth.store import schema as t
from berth.store.db import Database
from berth.store.errors import AlreadyExistsError, InUseError, InvalidReferenceError, NotFoundError
from berth.store.instances import an_instance


class Catalogue(Database):
    """Flavors, images and IP pools."""

    def add_flavor(self, flavor: Flavor) -> None:
        try:
            with self._write() as conn:
                conn.execute(
                    insert(t.flavors).values(
                        name=flavor.name,
                        spec=flavor.model_dump(mode="json"),
                        created_at=time.time(),
                    )
                )
                self._append(
                    conn,
                    [
                        (
                            "flavor_added",
                            None,
                            None,
                            {"name": flavor.name, "spec": flavor.model_dump(mode="json")},
                        )
                    ],
                )
        except IntegrityError:
            raise AlreadyExistsError("flavor", flavor.name) from None

    def delete_flavor(self, name: str) -> None:
        with self._write() as conn:
            used = an_instance(conn, t.instances.c.flavor == name)
            if used is not None:
                raise InUseError(f"flavor {name!r} is used by instance {used!r}")
            if conn.execute(delete(t.flavors).where(t.flavors.c.name == name)).rowcount == 0:
                raise NotFoundError("flavor", name)
            self._append(conn, [("flavor_deleted", None, None, {"name": name})])

    def list_flavors(self) -> list[Flavor]:
        with self._read() as conn:
            rows = conn.execute(select(t.flavors).order_by(t.flavors.c.name))
            return [Flavor.model_validate(r.spec) for r in rows]

    def add_image(self, image: dict[str, Any]) -> None:
        try:
            with self._write() as conn:
                conn.execute(insert(t.images).values(**image, created_at=time.time()))
                self._append(conn, [("image_added", None, None, {"name": image["name"]})])
        except IntegrityError:
            raise AlreadyExistsError("image", image["name"]) from None

    def list_images(self) -> list[dict[str, Any]]:
        with self._read() as conn:
            rows = conn.execute(select(t.images).order_by(t.images.c.name))
            return [
                {
                    "name": r.name,
                    "architecture": r.architecture,
                    "hypervisor_type": r.hypervisor_type,
                    "required_traits": r.required_traits,
                    "clusters": r.clusters,
                }
                for r in rows
            ]

    def get_image(self, name: str) -> dict[str, Any]:
        for image in self.list_images():
            if image["name"] == name:
                return image
        raise NotFoundError("image", name)

    def add_ip_pool(self, name: str, cluster: str, cidr: str, total: int) -> None:
        with self._write() as conn:
            if not conn.execute(
                select(t.clusters.c.name).where(t.clusters.c.name == cluster)
            ).first():
                raise InvalidReferenceError("cluster", f"unknown cluster {cluster!r}")
            try:
                with conn.begin_nested():
                    conn.execute(
                        insert(t.ip_pools).values(
                            name=name,
                            cluster=cluster,
                            cidr=cidr,
                            total=total,
                            used=0,
                            created_at=time.time(),
                        )
                    )
            except IntegrityError:
                raise AlreadyExistsError("network", name) from None
            self._append(conn, [("network_added", None, None, {"name": name, "cluster": cluster})])

    def list_ip_pools(self) -> list[dict[str, Any]]:
        with self._read() as conn:
            rows = conn.execute(select(t.ip_pools).order_by(t.ip_pools.c.name))
            return [
                {
                    "name": r.name,
                    "cluster": r.cluster,
                    "cidr": r.cidr,
                    "total": r.total,
                    "used": r.used,
                }
                for r in rows
            ]
