"""Which driver drives which cluster: the factory (kind + config -> driver) and the registry of
the drivers of the clusters that joined.

Kinds: `openstack` (`berth.cloud.openstack.OpenStackCloud`, imported only when a cluster of
that kind joins; its config is `OpenStackConfig`'s fields less `cluster`, plus `credential_ref`
and `notifications`)
and `simulated` (`berth.cloud.simulated.SimulatedCloud`). A simulated cloud lives in the process,
like a real cloud outlives a Berth replica: the config names it (`cloud`) and gives its fleet
(`fleet`, a fleet snapshot as JSON) the first time; a replica that restarts in the same process
finds the same cloud with the servers it had (tests and `berth serve` demos).

Config validation happens here, at the edge, with errors naming the field. A config holds
endpoints and a credential *reference* (`credential_ref`: an environment variable or a file the
driver reads), never a secret: `redacted` is what logs and API answers show.
"""

from __future__ import annotations

import importlib
import os
import re
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from berth.cloud.driver import CloudDriver
from berth.cloud.simulated import SimulatedCloud
from berth.core.model import Fleet
from berth.service.placing.errors import BadRequestError

KINDS = ("openstack", "simulated")
SECRET_KEYS = ("password", "secret", "token", "application_credential_secret")
"""Config keys that would hold a secret: refused (a config names a credential, never holds one)."""

_URL_PASSWORD = re.compile(r"(://[^:/@]+:)[^@/]*@")

DriverFactory = Callable[[str, str, Mapping[str, Any]], CloudDriver]
"""(cluster, kind, config) -> driver."""

_simulated: dict[str, SimulatedCloud] = {}
_simulated_lock = threading.Lock()


def check_config(kind: str, config: Mapping[str, Any]) -> None:
    """422 (`BadRequestError`, naming the field) unless the config is usable for `kind`."""
    if kind not in KINDS:
        raise BadRequestError("driver.kind", f"unknown kind {kind!r}: one of {', '.join(KINDS)}")
    for key in config:
        if key.lower() in SECRET_KEYS:
            raise BadRequestError(
                f"driver.config.{key}",
                "a cluster's config holds no secret: name it with credential_ref "
                "(an environment variable or a file the driver reads)",
            )
    if kind == "simulated":
        if not isinstance(config.get("cloud"), str) or not config["cloud"]:
            raise BadRequestError("driver.config.cloud", "the simulated cloud's name is required")
        if "fleet" in config:
            try:
                Fleet.model_validate(config["fleet"])
            except ValueError as exc:
                raise BadRequestError("driver.config.fleet", str(exc).splitlines()[0]) from None
        boot = config.get("boot_seconds", 0.0)
        if not isinstance(boot, int | float) or boot < 0:
            raise BadRequestError("driver.config.boot_seconds", "a number of seconds >= 0")
    else:
        openstack_config("check", config)


def resolve_credential(ref: str) -> str:
    """The secret a `credential_ref` names: `env:NAME` (an environment variable) or
    `file:PATH` (a file's first line)."""
    kind, _, where = ref.partition(":")
    if kind == "env" and where:
        value = os.environ.get(where)
        if value is None:
            raise BadRequestError("driver.config.credential_ref", f"${where} is not set")
        return value
    if kind == "file" and where:
        try:
            return Path(where).read_text().splitlines()[0].strip()
        except (OSError, IndexError):
            raise BadRequestError(
                "driver.config.credential_ref", f"cannot read a credential from {where}"
            ) from None
    raise BadRequestError("driver.config.credential_ref", "env:NAME or file:PATH")


def openstack_config(cluster: str, config: Mapping[str, Any]) -> Any:
    """`berth.cloud.openstack.OpenStackConfig` for the cluster (its credential resolved);
    422 naming the field that is wrong."""
    try:
        module: Any = importlib.import_module("berth.cloud.openstack")
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise BadRequestError(
            "driver.kind", f"the OpenStack driver is not installed here ({exc})"
        ) from None
    values = {k: v for k, v in config.items() if k not in ("credential_ref", "notifications")}
    if "credential_ref" in config:
        auth = dict(values.get("auth") or {})
        key = "token" if values.get("auth_type", "admin_token").endswith("token") else "password"
        auth[key] = resolve_credential(str(config["credential_ref"]))
        values["auth"] = auth
    try:
        return module.OpenStackConfig(cluster=cluster, **values)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise BadRequestError(f"driver.config.{where}", err["msg"]) from None


def redacted(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config as logs and answers show it: a simulated cloud's fleet summarised."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if key == "fleet" and isinstance(value, Mapping):
            out[key] = f"{len(value.get('hosts', []))} hosts"
        elif key == "auth" and isinstance(value, Mapping):
            out[key] = {k: "***" if k.lower() in SECRET_KEYS else v for k, v in value.items()}
        elif key.lower() in SECRET_KEYS:
            out[key] = "***"
        elif isinstance(value, str):
            out[key] = _URL_PASSWORD.sub(r"\1***@", value)  # rabbit://user:***@host
        else:
            out[key] = value
    return out


def simulated_cloud(cluster: str, config: Mapping[str, Any]) -> SimulatedCloud:
    """The process's simulated cloud named `config['cloud']`, made from its fleet once."""
    name = str(config["cloud"])
    with _simulated_lock:
        cloud = _simulated.get(name)
        if cloud is None:
            if "fleet" not in config:
                raise BadRequestError(
                    "driver.config.fleet", f"no simulated cloud {name!r} yet: give its fleet"
                )
            cloud = SimulatedCloud(
                cluster,
                Fleet.model_validate(config["fleet"]),
                boot_seconds=float(config.get("boot_seconds", 0.0)),
            )
            _simulated[name] = cloud
        return cloud


def register_simulated(name: str, cloud: SimulatedCloud) -> None:
    """Make `cloud` the process's simulated cloud `name` (a test or demo built it itself)."""
    with _simulated_lock:
        _simulated[name] = cloud


def forget_simulated(name: str) -> None:
    with _simulated_lock:
        _simulated.pop(name, None)


def make_driver(cluster: str, kind: str, config: Mapping[str, Any]) -> CloudDriver:
    """The driver for one cluster (the OpenStack package is imported only when needed)."""
    check_config(kind, config)
    if kind == "simulated":
        return simulated_cloud(cluster, config)
    module: Any = importlib.import_module("berth.cloud.openstack")
    settings = openstack_config(cluster, config)
    driver: CloudDriver = module.OpenStackCloud(
        settings, notifications=bool(config.get("notifications", True))
    )
    return driver


class CloudRegistry:
    """The drivers of the clusters this replica drives, by cluster name. Thread-safe."""

    def __init__(self, factory: DriverFactory = make_driver) -> None:
        self.factory = factory
        self._drivers: dict[str, CloudDriver] = {}
        self._lock = threading.Lock()

    def open(self, cluster: str, kind: str, config: Mapping[str, Any]) -> CloudDriver:
        """The cluster's driver, made on first use."""
        with self._lock:
            driver = self._drivers.get(cluster)
        if driver is not None:
            return driver
        driver = self.factory(cluster, kind, config)
        with self._lock:
            return self._drivers.setdefault(cluster, driver)

    def add(self, cluster: str, driver: CloudDriver) -> None:
        with self._lock:
            self._drivers[cluster] = driver

    def get(self, cluster: str) -> CloudDriver | None:
        with self._lock:
            return self._drivers.get(cluster)

    def drop(self, cluster: str) -> None:
        with self._lock:
            driver = self._drivers.pop(cluster, None)
        close = getattr(driver, "close", None)
        if callable(close):
            close()

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._drivers)
