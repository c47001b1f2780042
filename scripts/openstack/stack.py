"""Bring the test OpenStack clusters up or down (run by scripts/ensure-openstack.sh).

Runs in the OpenStack venv. For each cluster of layout.CLUSTERS: its databases on the machine's
PostgreSQL, its RabbitMQ vhost, then Placement, Glance, the Neutron stand-in and nova-api under
gunicorn (one worker each), nova-conductor and nova-scheduler, and after the conductor its
nova-compute services (Nova's fake virt driver, one host each). Then it seeds a test image,
flavors and aggregates and writes clusters.json. Every step is skipped when already done, so
`up` on a running stack takes a second. `down` stops the processes (their pid files).
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from pathlib import Path

import configs
import layout

HOME = Path(os.environ.get("BERTH_OPENSTACK_HOME", Path.home() / ".cache" / "berth-openstack"))
BIN = Path(sys.executable).parent
HERE = Path(__file__).resolve().parent


def say(*args):
    print("ensure-openstack:", *args, file=sys.stderr, flush=True)


def run(*argv, check=True, env=None):
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env)
    if check and done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(map(str, argv))}\n{done.stdout}\n{done.stderr}")
    return done


class Paths:
    def __init__(self, c: layout.Cluster):
        self.root = HOME / "clusters" / c.name
        self.etc, self.logs, self.pids = self.root / "etc", self.root / "logs", self.root / "run"
        self.state, self.data = self.root / "state", self.root / "data"

    def make(self):
        for d in (self.etc, self.logs, self.pids, self.state, self.data):
            d.mkdir(parents=True, exist_ok=True)


def install_modules():
    """Copy the stack's own modules into the venv (the fake driver must live in nova.virt)."""
    site = Path(sysconfig.get_paths()["purelib"])
    for name, dest in (("berth_noauth.py", site), ("berth_neutron.py", site),
                       ("berth_fake.py", site / "nova" / "virt")):
        src, dst = HERE / name, dest / name
        if not dst.exists() or dst.read_bytes() != src.read_bytes():
            shutil.copyfile(src, dst)


def write(path: Path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def write_configs(c: layout.Cluster, p: Paths):
    venv_etc = BIN.parent / "etc"
    ports = c.ports
    write(p.etc / "placement" / "placement.conf", configs.placement_conf(c, str(p.logs)))
    write(p.etc / "placement" / "gunicorn.conf.py", configs.gunicorn_conf(
        "placement.wsgi.api:application", ports["placement"], str(p.logs), "placement"))
    gpaste = p.etc / "glance" / "glance-api-paste.ini"
    write(gpaste, (venv_etc / "glance" / "glance-api-paste.ini").read_text())
    write(p.etc / "glance" / "glance-api.conf",
          configs.glance_conf(c, str(p.data), str(p.logs), str(gpaste)))
    write(p.etc / "glance" / "gunicorn.conf.py", configs.gunicorn_conf(
        "glance.wsgi.api:application", ports["image"], str(p.logs), "glance"))
    write(p.etc / "network" / "gunicorn.conf.py", configs.gunicorn_conf(
        "berth_neutron:application", ports["network"], str(p.logs), "network"))
    nova = p.etc / "nova"
    write(nova / "nova.conf", configs.nova_common(c, str(p.state / "control")))
    write(nova / "db.conf", configs.nova_db(c))
    write(nova / "api-paste.ini", configs.nova_paste((venv_etc / "nova" / "api-paste.ini").read_text()))
    write(nova / "api.conf", f"[DEFAULT]\nhost = api\nlog_file = {p.logs}/nova-api.log\n")
    write(nova / "gunicorn.conf.py", configs.gunicorn_conf(
        "nova.wsgi.osapi_compute:application", ports["compute"], str(p.logs), "nova-api"))
    for m in c.computes:
        state = p.state / m.host
        (state / "instances").mkdir(parents=True, exist_ok=True)
        write(nova / "providers" / m.host / "provider.yaml", configs.provider_yaml(m))
        write(nova / f"{m.host}.conf",
              configs.compute_conf(m, str(state), str(nova / "providers" / m.host)))
    (p.state / "control" / "locks").mkdir(parents=True, exist_ok=True)


def psql(sql: str, check=True):
    return run("psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-Atqc", sql,
               check=check)


DBS = ("nova_api", "nova_cell0", "nova", "placement", "glance")


def databases(c: layout.Cluster, p: Paths):
    stamp = p.root / "databases.done"
    if stamp.exists():
        return
    say(c.name, "creating databases and syncing schemas")
    for what in DBS:
        psql(f"DROP DATABASE IF EXISTS {c.db(what)}")
        psql(f"CREATE DATABASE {c.db(what)}")
    conf = p.etc / "nova"
    nova = ("--config-file", conf / "nova.conf", "--config-file", conf / "db.conf")
    run(BIN / "placement-manage", "--config-file", p.etc / "placement" / "placement.conf",
        "db", "sync")
    run(BIN / "nova-manage", *nova, "api_db", "sync")
    run(BIN / "nova-manage", *nova, "cell_v2", "map_cell0", "--database_connection",
        c.url("nova_cell0"))
    run(BIN / "nova-manage", *nova, "cell_v2", "create_cell", "--name", "cell1",
        "--database_connection", c.url("nova"), "--transport-url", c.transport_url)
    run(BIN / "nova-manage", *nova, "db", "sync")
    run(BIN / "glance-manage", "--config-file", p.etc / "glance" / "glance-api.conf", "db_sync")
    stamp.write_text("done\n")


def rabbit(c: layout.Cluster):
    vhosts = run("rabbitmqctl", "-q", "list_vhosts").stdout.split()
    if c.vhost not in vhosts:
        run("rabbitmqctl", "add_vhost", c.vhost)
    run("rabbitmqctl", "set_permissions", "-p", c.vhost, "guest", ".*", ".*", ".*")
    # Nova declares versioned_notifications.* queues and fills them whether or not anyone
    # listens (Berth listens on its own queue): cap them.
    run("rabbitmqctl", "set_policy", "-p", c.vhost, "--apply-to", "queues", "berth-cap",
        r"^versioned_notifications\.", '{"max-length": 1000}')


def alive(pidfile: Path) -> bool:
    try:
        pid = int(pidfile.read_text())
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def start(p: Paths, name: str, argv, cwd=None, env_extra=None):
    pidfile = p.pids / f"{name}.pid"
    if alive(pidfile):
        return False
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{BIN}:{env.get('PATH', '/usr/bin:/bin')}"
    env.update(env_extra or {})
    out = open(p.logs / f"{name}.out", "ab")
    proc = subprocess.Popen([str(a) for a in argv], cwd=cwd, env=env, stdout=out,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    pidfile.write_text(f"{proc.pid}\n")
    return True


def http(url, method="GET", body=None, headers=None, timeout=10):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("X-Auth-Token", "admin")
    req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        raw = resp.read()
        return json.loads(raw) if raw else None


def wait(what, probe, timeout=120.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = probe()
            if value:
                return value
        except (OSError, urllib.error.URLError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"ensure-openstack: timed out waiting for {what}")
        time.sleep(0.3)


def services(c):
    url = f"http://127.0.0.1:{c.ports['compute']}/v2.1/os-services"
    return http(url)["services"]


def up_binary(c, binary, hosts=None):
    def probe():
        got = {s["host"] for s in services(c) if s["binary"] == binary and s["state"] == "up"}
        return got >= set(hosts) if hosts else bool(got)
    return probe


def start_cluster(c: layout.Cluster, p: Paths):
    ports = c.ports
    started = start(p, "placement", [BIN / "gunicorn"], cwd=p.etc / "placement",
                    env_extra={"OS_PLACEMENT_CONFIG_DIR": str(p.etc / "placement")})
    started |= start(p, "glance", [BIN / "gunicorn"], cwd=p.etc / "glance",
                     env_extra={"OS_GLANCE_CONFIG_DIR": str(p.etc / "glance")})
    started |= start(p, "network", [BIN / "gunicorn"], cwd=p.etc / "network")
    nova = p.etc / "nova"
    started |= start(p, "nova-api", [BIN / "gunicorn"], cwd=nova, env_extra={
        "OS_NOVA_CONFIG_DIR": str(nova),
        "OS_NOVA_CONFIG_FILES": "api-paste.ini;nova.conf;db.conf;api.conf"})
    control = ("--config-file", nova / "nova.conf", "--config-file", nova / "db.conf")
    for binary in ("nova-conductor", "nova-scheduler"):
        started |= start(p, binary, [BIN / binary, *control, "--log-file",
                                     p.logs / f"{binary}.log"])
    wait(f"{c.name} placement", lambda: http(f"http://127.0.0.1:{ports['placement']}/"))
    wait(f"{c.name} compute API", lambda: services(c) is not None)
    wait(f"{c.name} nova-conductor", up_binary(c, "nova-conductor"))
    for m in c.computes:
        started |= start(p, m.host, [
            BIN / "nova-compute", "--config-file", nova / "nova.conf", "--config-file",
            nova / f"{m.host}.conf", "--log-file", p.logs / f"{m.host}.log"])
    hosts = [m.host for m in c.computes]
    wait(f"{c.name} computes", up_binary(c, "nova-compute", hosts), timeout=180)
    wait(f"{c.name} glance", lambda: http(f"http://127.0.0.1:{ports['image']}/v2/images"))
    wait(f"{c.name} neutron stand-in", lambda: http(f"http://127.0.0.1:{ports['network']}/"))
    if started:
        run(BIN / "nova-manage", *control, "cell_v2", "discover_hosts")
    compute = f"http://127.0.0.1:{ports['compute']}/v2.1"
    wait(f"{c.name} hypervisors",
         lambda: len(http(f"{compute}/os-hypervisors")["hypervisors"]) >= len(hosts))


def cluster_json(c: layout.Cluster, p: Paths, seeded: dict) -> dict:
    ports = c.ports
    return {
        "name": c.name,
        "compute": f"http://127.0.0.1:{ports['compute']}/v2.1",
        "placement": f"http://127.0.0.1:{ports['placement']}",
        "image": f"http://127.0.0.1:{ports['image']}",
        "network": f"http://127.0.0.1:{ports['network']}",
        "token": "admin",
        "transport_url": c.transport_url,
        "notification_exchange": "nova",
        "notification_topic": "versioned_notifications",
        "hosts": [m.host for m in c.computes],
        "image_id": seeded["image_id"],
        "flavors": seeded["flavors"],
        "aggregates": seeded["aggregates"],
        "logs": str(p.logs),
    }


def up(names):
    install_modules()
    out = []
    for c in layout.CLUSTERS:
        if names and c.name not in names:
            continue
        p = Paths(c)
        p.make()
        write_configs(c, p)
        rabbit(c)
        databases(c, p)
        start_cluster(c, p)
        import seed  # the OpenStack SDK: imported late, it is slow to load

        out.append(cluster_json(c, p, seed.seed(c)))
    target = HOME / "clusters.json"
    if names and target.exists():  # keep the clusters not named this time
        kept = [c for c in json.loads(target.read_text())["clusters"] if c["name"] not in names]
        order = [c.name for c in layout.CLUSTERS]
        out = sorted(kept + out, key=lambda c: order.index(c["name"]) if c["name"] in order else 99)
    target.write_text(json.dumps({"clusters": out}, indent=2) + "\n")
    print(target)


def stop_pid(pidfile: Path):
    if not alive(pidfile):
        pidfile.unlink(missing_ok=True)
        return
    pid = int(pidfile.read_text())
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    for _ in range(50):
        if not alive(pidfile):
            break
        time.sleep(0.1)
    else:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    pidfile.unlink(missing_ok=True)


def down(names):
    for c in layout.CLUSTERS:
        if names and c.name not in names:
            continue
        p = Paths(c)
        if p.pids.exists():
            for pidfile in sorted(p.pids.glob("*.pid")):
                stop_pid(pidfile)
        say(c.name, "stopped")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("action", choices=("up", "down"))
    ap.add_argument("clusters", nargs="*")
    args = ap.parse_args()
    (up if args.action == "up" else down)(args.clusters)


if __name__ == "__main__":
    main()
