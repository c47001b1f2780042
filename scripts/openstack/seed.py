"""Seed a test cluster (idempotent): a tiny image, the layout's flavors and aggregates."""

import openstack

import layout

IMAGE = "berth-fake"


def connect(c: layout.Cluster):
    ports = c.ports
    return openstack.connect(
        auth_type="admin_token",
        auth={"endpoint": f"http://127.0.0.1:{ports['compute']}/v2.1", "token": "admin"},
        compute_endpoint_override=f"http://127.0.0.1:{ports['compute']}/v2.1",
        image_endpoint_override=f"http://127.0.0.1:{ports['image']}",
        placement_endpoint_override=f"http://127.0.0.1:{ports['placement']}",
        compute_api_version="2.74",
    )


def seed(c: layout.Cluster) -> dict:
    conn = connect(c)
    image = conn.image.find_image(IMAGE)
    if image is None or image.status != "active":
        if image is not None:
            conn.image.delete_image(image)
        # The fake driver never reads the bits; Nova only needs an active image.
        image = conn.image.create_image(
            name=IMAGE, data=b"berth" * 64, disk_format="raw", container_format="bare",
            visibility="shared", allow_duplicates=True,
        )
    existing = {f.name for f in conn.compute.flavors(is_public=None)}
    for name, vcpus, ram, disk, specs in layout.FLAVORS:
        if name in existing:
            continue
        flavor = conn.compute.create_flavor(name=name, vcpus=vcpus, ram=ram, disk=disk)
        if specs:
            conn.compute.create_flavor_extra_specs(flavor, specs)
    aggregates = {a.name: a for a in conn.compute.aggregates()}
    for name, zone, hosts, metadata in c.aggregates:
        agg = aggregates.get(name)
        if agg is None:
            agg = conn.compute.create_aggregate(name=name, availability_zone=zone)
        for host in hosts:
            if host not in (agg.hosts or []):
                agg = conn.compute.add_host_to_aggregate(agg, host)
        if metadata and any((agg.metadata or {}).get(k) != v for k, v in metadata.items()):
            conn.compute.set_aggregate_metadata(agg, metadata)
    return {
        "image_id": image.id,
        "flavors": [f[0] for f in layout.FLAVORS],
        "aggregates": [a[0] for a in c.aggregates],
    }
