"""Component contrasts of the fleet test, on a fleet whose truth we wrote: four XID 94s, each on one
GPU of a two-host job (four GPUs a host). Before each, the memory of the failing GPU alone runs
hot (the cause); every GPU of the job runs hot (the workload); and the failing GPUs draw high power
all the time (parts noisy for weeks). The contrasts must tell the three apart."""
from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from telemetry.queries import fleet_test as st

from . import BASE, event_row, every, write_rows, write_samples
from .test_fleet_test import _job

pytestmark = pytest.mark.slow

CLUSTER = "partcontrasts"
HOSTS = ("x1", "x2")
GPUS = ("gpu0", "gpu1", "gpu2", "gpu3")
DAYS = 4
# (hours after BASE, host, gpu) of each XID 94
FAILURES = [(29, "x1", "gpu1"), (51, "x2", "gpu3"), (68, "x1", "gpu2"), (82, "x2", "gpu0")]


@pytest.fixture(scope="module")
def part_fleet(telemetry_store):
    return write_part_fleet(CLUSTER)


@pytest.fixture(scope="module")
def unnamed_fleet(telemetry_store):
    return write_part_fleet(CLUSTER + "-unnamed", xid=None)


def write_part_fleet(cluster: str, *, xid: int | None = 94) -> str:
    """The fleet of the module docstring under ``cluster`` (other modules write it under theirs);
    ``xid`` None: no XID logged, so its NODE_FAILs name no part."""
    ts = every(BASE, 60, DAYS * 1440)
    minute = np.arange(DAYS * 1440)
    rng = np.random.default_rng(9)
    t0s = [(h * 60, host, gpu) for h, host, gpu in FAILURES]
    for host in HOSTS:
        for gpu in GPUS:
            before_mine = np.zeros(len(ts), dtype=bool)
            before_any = np.zeros(len(ts), dtype=bool)
            for m0, fh, fg in t0s:
                window = (minute >= m0 - 60) & (minute < m0)
                before_any |= window
                if (fh, fg) == (host, gpu):
                    before_mine |= window
            failing_part = any((fh, fg) == (host, gpu) for _, fh, fg in t0s)
            write_samples(cluster, host, gpu, "gpu.mem_temp", ts, 70 + rng.normal(0, 1, len(ts)) + 25 * before_mine)
            write_samples(cluster, host, gpu, "gpu.temp", ts, 60 + rng.normal(0, 1, len(ts)) + 25 * before_any)
            write_samples(cluster, host, gpu, "gpu.power", ts, (650 if failing_part else 300) + rng.normal(0, 5, len(ts)))
    jobs, alloc, events = [], [], []
    for k, (hours, host, gpu) in enumerate(FAILURES):
        end = BASE + timedelta(hours=hours)
        for h in HOSTS:
            j, a = _job(str(70 + k), h, end, cluster=cluster)
            j["start_ts"] = a["start_ts"] = end - timedelta(hours=6)
            j["n_hosts"] = 2
            alloc.append(a)
        jobs.append(j)
        if xid is not None:
            events.append(event_row(cluster, host, end - timedelta(minutes=1), "xid", xid, gpu, "critical"))
    write_rows("jobs", jobs)
    write_rows("job_hosts", alloc)
    if events:
        write_rows("events", events)
    return cluster


def contrasts_of(cluster, metric, threshold):
    r = st.run(st.Signal(metric, "threshold", ">", threshold, 3600), st.parse_outcome("XID 94"),
               clusters=[cluster]).as_dict()
    assert r["outcome_interruptions"] == 4
    return r["component_contrasts"]


def test_the_cause_holds_against_its_siblings_and_its_own_past(part_fleet):
    c = contrasts_of(part_fleet, "gpu.mem_temp", 85)
    assert c["failures"] == 4 and c["failing_part"]["fired"] == 4
    assert (c["siblings"]["fired"], c["siblings"]["windows"]) == (0, 4 * 7)  # 7 other GPUs in each job
    assert c["siblings"]["holds"] and c["siblings"]["p"] < 1e-3
    assert c["own_history"]["windows"] > 20 and c["own_history"]["fired"] == 0 and c["own_history"]["holds"]
    assert c["job_wide"] == {"failures": 0, "of": 4, "flagged": False}


def test_a_job_wide_rise_fails_the_sibling_contrast_and_is_flagged(part_fleet):
    c = contrasts_of(part_fleet, "gpu.temp", 80)
    assert c["failing_part"]["fired"] == 4
    assert c["siblings"]["fired"] == c["siblings"]["windows"] == 28 and not c["siblings"]["holds"]
    assert c["own_history"]["holds"]  # it is quiet at other times: only the siblings tell the workload
    assert c["job_wide"] == {"failures": 4, "of": 4, "flagged": True}


def test_a_part_noisy_for_weeks_fails_its_own_history(part_fleet):
    c = contrasts_of(part_fleet, "gpu.power", 500)
    assert c["failing_part"]["fired"] == 4
    assert c["siblings"]["fired"] == 12  # in each job, the three other always-noisy GPUs fire too
    assert c["own_history"]["fired"] == c["own_history"]["windows"] > 20 and not c["own_history"]["holds"]
    assert c["own_history"]["p"] == 1.0
    assert all(type(v) is int for v in (c["failures"], c["failing_part"]["fired"], c["siblings"]["fired"],
                                         c["own_history"]["fired"], c["job_wide"]["failures"]))  # JSON as is


def test_an_outcome_that_names_no_part_has_no_component_contrasts(part_fleet, unnamed_fleet):
    signal = st.Signal("gpu.mem_temp", "threshold", ">", 85, 3600)
    r = st.run(signal, st.parse_outcome("NODE_FAIL"), clusters=[unnamed_fleet]).as_dict()
    assert r["outcome_interruptions"] == 4 and r["component_contrasts"] is None
    # the same NODE_FAILs with their XID 94 logged a minute before: the XID names the part
    named = st.run(signal, st.parse_outcome("NODE_FAIL"), clusters=[part_fleet]).as_dict()
    assert named["component_windows"] == 4 and named["component_contrasts"] is not None
