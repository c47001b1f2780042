"""The catalogue: flavors, images and networks (IP pools)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from berth.core.flavors import parse_flavor
from berth.core.model import Flavor
from berth.service import schemas as s
from berth.service.deps import Operator, Reader, ReplicaDep, StoreDep, Who
from berth.service.errors import not_found

router = APIRouter(prefix="/v1", tags=["catalogue"])


def _flavor_out(f: Flavor) -> s.FlavorOut:
    return s.FlavorOut(**f.model_dump(mode="json"))


@router.get("/flavors", response_model=list[s.FlavorOut])
def list_flavors(_p: Who, store: StoreDep) -> list[s.FlavorOut]:
    return [_flavor_out(f) for f in store.list_flavors()]


@router.post("/flavors", status_code=201, response_model=s.FlavorOut)
def add_flavor(body: s.FlavorIn, _p: Operator, store: StoreDep, replica: ReplicaDep) -> s.FlavorOut:
    flavor = Flavor.model_validate(body.model_dump())
    parse_flavor(flavor, replica.aliases)  # bad extra specs: 422 naming the key
    store.add_flavor(flavor)
    replica.sync()
    return _flavor_out(flavor)


@router.get("/flavors/{name}", response_model=s.FlavorOut)
def get_flavor(name: s.Ident, _p: Who, store: StoreDep) -> s.FlavorOut:
    for f in store.list_flavors():
        if f.name == name:
            return _flavor_out(f)
    raise not_found("flavor", name)


@router.delete("/flavors/{name}", status_code=204)
def delete_flavor(name: s.Ident, _p: Operator, store: StoreDep, replica: ReplicaDep) -> Response:
    store.delete_flavor(name)
    replica.sync()
    return Response(status_code=204)


@router.get("/images", response_model=list[s.ImageOut])
def list_images(_p: Who, store: StoreDep) -> list[s.ImageOut]:
    return [s.ImageOut(**i) for i in store.list_images()]


@router.post("/images", status_code=201, response_model=s.ImageOut)
def add_image(body: s.ImageIn, _p: Operator, store: StoreDep) -> s.ImageOut:
    store.add_image(body.model_dump())
    return s.ImageOut(**body.model_dump())


@router.get("/images/{name}", response_model=s.ImageOut)
def get_image(name: s.Ident, _p: Who, store: StoreDep) -> s.ImageOut:
    return s.ImageOut(**store.get_image(name))


@router.get("/networks", response_model=list[s.NetworkOut])
def list_networks(_p: Reader, store: StoreDep) -> list[s.NetworkOut]:
    return [s.NetworkOut(**n) for n in store.list_ip_pools()]


@router.post("/networks", status_code=201, response_model=s.NetworkOut)
def add_network(body: s.NetworkIn, _p: Operator, store: StoreDep) -> s.NetworkOut:
    store.add_ip_pool(body.name, body.cluster, body.cidr, body.total)
    return s.NetworkOut(**body.model_dump(), used=0)
