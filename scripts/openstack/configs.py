"""The configuration files of one test cluster (pure: text from the layout and folders)."""

import textwrap

from layout import Cluster, Compute

QUOTA = "\n".join(
    f"{k} = -1"
    for k in (
        "instances", "cores", "ram", "metadata_items", "injected_files",
        "injected_file_content_bytes", "injected_file_path_length", "key_pairs",
        "server_groups", "server_group_members",
    )
)


def placement_conf(c: Cluster, logs: str) -> str:
    return textwrap.dedent(f"""\
        [DEFAULT]
        log_file = {logs}/placement.log
        [api]
        auth_strategy = noauth2
        [placement_database]
        connection = {c.url("placement")}
        """)


def glance_conf(c: Cluster, data: str, logs: str, paste: str) -> str:
    return textwrap.dedent(f"""\
        [DEFAULT]
        log_file = {logs}/glance.log
        enabled_backends = fs:file
        worker_self_reference_url = http://127.0.0.1:{c.ports["image"]}
        [glance_store]
        default_backend = fs
        [fs]
        filesystem_store_datadir = {data}/images
        [os_glance_staging_store]
        filesystem_store_datadir = {data}/staging
        [os_glance_tasks_store]
        filesystem_store_datadir = {data}/tasks
        [database]
        connection = {c.url("glance")}
        [paste_deploy]
        flavor =
        config_file = {paste}
        [oslo_policy]
        enforce_new_defaults = False
        """)


def nova_common(c: Cluster, state: str) -> str:
    p = c.ports
    return textwrap.dedent(f"""\
        [DEFAULT]
        transport_url = {c.transport_url}
        my_ip = 127.0.0.1
        state_path = {state}
        compute_driver = berth_fake.BerthFakeDriver
        [oslo_concurrency]
        lock_path = {state}/locks
        [notifications]
        notification_format = versioned
        notify_on_state_change = vm_state
        [oslo_messaging_notifications]
        driver = messagingv2
        [placement]
        auth_type = admin_token
        endpoint = http://127.0.0.1:{p["placement"]}
        token = admin
        [neutron]
        auth_type = admin_token
        endpoint = http://127.0.0.1:{p["network"]}
        endpoint_override = http://127.0.0.1:{p["network"]}
        token = admin
        [glance]
        endpoint_override = http://127.0.0.1:{p["image"]}
        [scheduler]
        discover_hosts_in_cells_interval = -1
        workers = 1
        [conductor]
        workers = 1
        [vnc]
        enabled = false
        [wsgi]
        api_paste_config = api-paste.ini
        """)


def nova_db(c: Cluster) -> str:
    return textwrap.dedent(f"""\
        [api_database]
        connection = {c.url("nova_api")}
        [database]
        connection = {c.url("nova")}
        [quota]
        """) + QUOTA + "\n"


def compute_conf(m: Compute, state: str, providers: str) -> str:
    return textwrap.dedent(f"""\
        [DEFAULT]
        host = {m.host}
        state_path = {state}
        instances_path = {state}/instances
        reserved_host_cpus = {m.reserved_cpus}
        reserved_host_memory_mb = {m.reserved_memory_mb}
        reserved_host_disk_mb = {m.reserved_disk_gb * 1024}
        cpu_allocation_ratio = {m.cpu_ratio}
        ram_allocation_ratio = {m.ram_ratio}
        disk_allocation_ratio = {m.disk_ratio}
        [compute]
        provider_config_location = {providers}
        [oslo_concurrency]
        lock_path = {state}/locks
        [berth_fake]
        vcpus = {m.vcpus}
        pcpus = {m.pcpus}
        memory_mb = {m.memory_mb}
        local_gb = {m.local_gb}
        """)


def provider_yaml(m: Compute) -> str:
    lines = ["meta:", "  schema_version: '1.0'", "providers:", "  - identification:",
             "      name: $COMPUTE_NODE"]
    if m.custom:
        lines += ["    inventories:", "      additional:"]
        for rc, total in m.custom.items():
            lines += [f"        - {rc}:", f"            total: {total}", "            reserved: 0",
                      "            min_unit: 1", f"            max_unit: {total}",
                      "            step_size: 1", "            allocation_ratio: 1.0"]
    if m.traits:
        lines += ["    traits:", "      additional:"] + [f"        - {t}" for t in m.traits]
    return "\n".join(lines) + "\n"


def gunicorn_conf(app: str, port: int, logs: str, name: str) -> str:
    # One worker, a few threads: enough for tests and benchmarks, light on 2 cores.
    return textwrap.dedent(f"""\
        wsgi_app = "{app}"
        bind = "127.0.0.1:{port}"
        workers = 1
        threads = 4
        worker_class = "gthread"
        timeout = 120
        accesslog = None
        errorlog = "{logs}/{name}-gunicorn.log"
        proc_name = "berth-{name}"
        """)


def nova_paste(original: str) -> str:
    """Nova's api-paste.ini with Keystone's authtoken swapped for scripts/openstack/berth_noauth."""
    text = original.replace(" authtoken keystonecontext ", " berthnoauth keystonecontext ")
    return text + "\n[filter:berthnoauth]\npaste.filter_factory = berth_noauth:filter_factory\n"
