"""The generic trace format: good files read, bad files give one error naming the line."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import pytest

from berth.sim.trace import Business, TraceError
from berth.sim.tracefile import read_trace, write_trace

GOOD = """id,start,end,vcpus,memory_mb,business,zone,group
a,0,10,2,4096,on-demand,az1,
b,1,,4,8192,preemptible,az2,web
c,1,inf,2,4096,,az1,web
d,3.5,7,2,4096,auto-scaling,,
"""


def write(tmp_path: Path, text: str, name: str = "t.csv") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_reads_a_good_csv(tmp_path):
    tr = read_trace(write(tmp_path, GOOD))
    assert tr.ids == ["a", "b", "c", "d"]
    assert tr.start.tolist() == [0, 1, 1, 3.5]
    assert tr.end[0] == 10
    assert math.isinf(tr.end[1])
    assert math.isinf(tr.end[2])
    assert tr.flavor_names == ["v2-m4096", "v4-m8192"]
    assert tr.flavors["v4-m8192"].vcpus == 4
    assert tr.business.tolist() == [0, 2, 0, 1]
    assert tr.zones == ["az1", "az2"]
    assert tr.zone.tolist() == [0, 1, 0, -1]
    assert [g.id for g in tr.groups] == ["web"]
    assert tr.group.tolist() == [-1, 0, 0, -1]
    assert tr.lines.tolist() == [2, 3, 4, 5]


def test_flavor_names_and_priority_column(tmp_path):
    text = "id,start,end,flavor,priority\nx,0,5,m1.small,0\ny,1,6,m1.small,1\n"
    tr = read_trace(write(tmp_path, text))
    assert tr.flavor_names == ["m1.small"]
    assert tr.flavors == {}  # defined by the fleet file
    assert tr.business.tolist() == [int(Business.ON_DEMAND), int(Business.PREEMPTIBLE)]


def test_jsonl_and_gzip(tmp_path):
    lines = [
        '{"id": "a", "start": 0, "end": 5, "vcpus": 1, "memory_mb": 512}',
        "",
        '{"id": "b", "start": 2, "flavor": "x", "business": "preemptible"}',
    ]
    p = tmp_path / "t.jsonl.gz"
    with gzip.open(p, "wt") as f:
        f.write("\n".join(lines) + "\n")
    tr = read_trace(p)
    assert tr.ids == ["a", "b"]
    assert tr.lines.tolist() == [1, 3]
    assert math.isinf(tr.end[1])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("id,end,vcpus\n", ":1: missing column(s) start, flavor (or vcpus and memory_mb)"),
        ("", ":1: empty file"),
        ("id,start,vcpus,memory_mb\na,0,2,1024\nb,1,-2,1024\n", ":3: vcpus must not be negative"),
        ("id,start,vcpus,memory_mb\na,0,2,1.5\n", ":2: memory_mb must be a whole number"),
        ("id,start,vcpus,memory_mb\na,0,0,100\n", ":2: vcpus and memory_mb must be at least 1"),
        (
            "id,start,flavor\na,5,f\nb,7,f\nc,6,f\n",
            ":4: start 6 is before the previous row's start 7 (rows must be sorted",
        ),
        ("id,start,end,flavor\na,5,4,f\n", ":2: end 4 is before start 5"),
        ("id,start,flavor\na,x,f\n", ":2: start must be a number, got 'x'"),
        ("id,start,flavor\na,1,f\na,2,f\n", ":3: duplicate id 'a' (first on line 2)"),
        ("id,start,flavor,business\na,1,f,spot\n", ":2: unknown business type 'spot'"),
        ("id,start,flavor,priority\na,1,f,3\n", ":2: priority must be 0 (regular) or 1 (low)"),
        ("id,start,flavor\na,1,f,extra\n", ":2: 4 fields, the header has 3"),
        ("id,start,flavor\na,1,\n", ":2: needs a flavor, or vcpus and memory_mb"),
    ],
)
def test_bad_csv_names_the_line(tmp_path, text, message):
    p = write(tmp_path, text)
    with pytest.raises(TraceError) as info:
        read_trace(p)
    assert str(info.value).startswith(str(p))
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"id": "a", "start": 0, "flavor": "f"}', '{"id": "b"}'], ":2: missing field(s) start"),
        (['{"id": "a", "start": 0, "flavor": "f"}', "{oops"], ":2: not valid JSON"),
        (['["a", 0]'], ":1: expected a JSON object per line"),
        (
            ['{"id": "a", "start": 0, "vcpus": -1, "memory_mb": 5}'],
            ":1: vcpus must not be negative",
        ),
        (
            ['{"id": "a", "start": 3, "flavor": "f"}', '{"id": "b", "start": 1, "flavor": "f"}'],
            ":2: start 1 is before the previous row's start 3",
        ),
    ],
)
def test_bad_jsonl_names_the_line(tmp_path, lines, message):
    p = write(tmp_path, "\n".join(lines) + "\n", "t.jsonl")
    with pytest.raises(TraceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_trace(p)


def test_missing_file(tmp_path):
    with pytest.raises(TraceError, match="no such file"):
        read_trace(tmp_path / "nope.csv")


@pytest.mark.parametrize("name", ["out.csv", "out.jsonl"])
def test_write_then_read_round_trips(tmp_path, name):
    tr = read_trace(write(tmp_path, GOOD))
    out = tmp_path / name
    write_trace(tr, out)
    back = read_trace(out)
    assert back.ids == tr.ids
    assert back.start.tolist() == tr.start.tolist()
    assert back.end.tolist() == tr.end.tolist()
    assert [back.flavor_names[i] for i in back.flavor] == [tr.flavor_names[i] for i in tr.flavor]
    assert back.business.tolist() == tr.business.tolist()
    assert back.zone.tolist() == tr.zone.tolist()
    assert back.group.tolist() == tr.group.tolist()
    assert back.flavors == tr.flavors  # plain flavors travel with their size


def test_a_named_flavor_must_keep_its_size(tmp_path):
    text = "id,start,flavor,vcpus,memory_mb\na,0,web,2,4096\nb,1,web,4,4096\n"
    with pytest.raises(TraceError, match=r":3: flavor 'web' is 2 vCPUs / 4096 MB / 0 GB"):
        read_trace(write(tmp_path, text))
