"""The Azure sample reader (a small file of the same shape; the real sample when present)."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

from berth.sim.azure import COLUMNS, SAMPLE, find_azure_dir, flavor_name, read_azure
from berth.sim.hosttypes import AZURE_SERVERS, HOST_TYPES
from berth.sim.trace import DAY, Business, TraceError


def make_sample(tmp_path: Path, rows: list[tuple[object, ...]]) -> Path:
    with gzip.open(tmp_path / SAMPLE, "wt") as f:
        f.write(",".join(COLUMNS) + "\n")
        for r in rows:
            f.write(",".join(str(x) for x in r) + "\n")
    return tmp_path


def test_reads_priorities_units_and_times(tmp_path):
    d = make_sample(
        tmp_path,
        [
            (1, 10, 200.0, 28.0, 0, -1497.0, "inf"),
            (2, 11, 11.0, 3.0, 1, 0.5, 1.25),
            (3, 10, 200.0, 28.0, 0, 0.75, 13.9),
        ],
    )
    tr = read_azure(d)
    assert tr.ids == ["1", "2", "3"]
    assert (
        tr.flavor_names
        == [flavor_name(200, 28), flavor_name(11, 3)]
        == [
            "az-c200-r28",
            "az-c11-r3",
        ]
    )
    assert tr.flavors["az-c200-r28"].vcpus == 100
    assert tr.flavors["az-c11-r3"].vcpus == 6  # ceil(11 / 2)
    assert tr.flavors["az-c11-r3"].memory_mb == 3
    assert tr.business.tolist() == [
        int(Business.ON_DEMAND),
        int(Business.PREEMPTIBLE),
        int(Business.ON_DEMAND),
    ]
    assert tr.start.tolist() == [-1497.0 * DAY, 0.5 * DAY, 0.75 * DAY]
    assert math.isinf(tr.end[0])
    assert tr.initial.tolist() == [True, False, False]
    assert tr.horizon == DAY
    assert "Protean" in (tr.citation or "")
    assert "CoSpot" in (tr.citation or "")


def test_bad_rows_name_the_line(tmp_path):
    d = make_sample(tmp_path, [(1, 1, 2.0, 2.0, 0, 1.0, 2.0), (2, 1, 2.0, 2.0, 0, 0.5, 2.0)])
    with pytest.raises(TraceError, match=r":3: rows must be sorted by starttime"):
        read_azure(d)
    d = make_sample(tmp_path, [(1, 1, -2.0, 2.0, 0, 1.0, 2.0)])
    with pytest.raises(TraceError, match=r":2: cores and ram must be positive"):
        read_azure(d)


def test_missing_sample_says_where_it_looked(tmp_path, monkeypatch):
    with pytest.raises(TraceError, match=r"not found \(tried .*missing"):
        find_azure_dir(tmp_path / "missing")
    monkeypatch.setenv("BERTH_AZURE_TRACE_DIR", str(tmp_path / "none"))
    with pytest.raises(TraceError, match="none"):
        find_azure_dir()


def _real_dir() -> Path | None:
    try:
        return find_azure_dir()
    except TraceError:
        return None


REAL = _real_dir()


@pytest.mark.skipif(REAL is None, reason="the Azure sample is not available")
def test_the_real_sample():
    tr = read_azure(REAL)
    assert len(tr) == 52_509
    assert len(tr.flavor_names) == 85
    assert int(tr.preemptible.sum()) == 5_932
    assert int(tr.initial.sum()) == 7_396
    assert max(f.vcpus for f in tr.flavors.values()) <= 4096


@pytest.mark.skipif(REAL is None, reason="the Azure sample is not available")
def test_host_types_match_cospot_capacities():
    assert REAL is not None
    data = json.loads((REAL / "server_vm_cores_ram.json").read_text())
    cores = {int(k[13:-1]): v for k, v in data[1].items()}
    ram = {int(k[11:-1]): v for k, v in data[3].items()}
    assert {k: (cores[k], ram[k]) for k in cores} == AZURE_SERVERS
    for k, (c, r) in AZURE_SERVERS.items():
        cell = HOST_TYPES[f"azure-{k}"]["numa_cells"][0]
        assert cell == {"shared_cpus": int(c // 2), "memory_mb": int(r)}
