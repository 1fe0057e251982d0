"""An outcome by Slurm state (NODE_FAIL) or "any interruption" names no part, but an interruption's
own hardware event near t0 does: a hardware XID names its GPU, a link-down its port, a PSU failure
its PSU (contrasts.failing_units). Each kind of event written here, and each that must NOT name a
part: a software XID (the job's own error, on a GPU it used), an event on a host outside the job,
an event long before t0, none at all."""
from __future__ import annotations

from datetime import timedelta

import pytest

from telemetry.queries import contrasts, windows

from . import BASE, event_row, job_rows, write_rows

CLUSTER = "stateparts"
HOSTS = [f"s{i:02d}" for i in range(32)]
# job -> (its 4 hosts, hours after BASE of its NODE_FAIL, the event near t0: (host, kind, code, component,
# minutes before t0) or None, the (host, unit) the interruption must name or None)
JOBS = {
    "700": (HOSTS[0:4], 30, ("s02", "psu_failure", 0, "psu3", 1), ("s02", "psu3")),
    "701": (HOSTS[4:8], 34, ("s05", "xid", 79, "gpu5", 1), ("s05", "gpu5")),
    "702": (HOSTS[8:12], 38, ("s09", "link_down", 0, "mlx5_2/1", 0.5), ("s09", "mlx5_2")),
    "703": (HOSTS[12:16], 42, ("s13", "xid", 13, "gpu1", 1), None),  # software: the job's own error
    "704": (HOSTS[16:20], 46, ("s31", "xid", 79, "gpu0", 1), None),  # on a host outside the job
    "705": (HOSTS[20:24], 50, ("s21", "xid", 79, "gpu4", 120), None),  # two hours before t0
    "706": (HOSTS[24:28], 54, None, None),  # no event at all
}


@pytest.fixture(scope="module")
def fleet(telemetry_store):
    jobs, alloc, events = [], [], []
    for job_id, (hosts, hours, event, _) in JOBS.items():
        end = BASE + timedelta(hours=hours)
        for i, h in enumerate(hosts):
            j, a = job_rows(job_id, h, end, cluster=CLUSTER)
            if i == 0:
                j["n_hosts"] = len(hosts)
                jobs.append(j)
            alloc.append(a)
        if event:
            host, kind, code, comp, minutes = event
            events.append(event_row(CLUSTER, host, end - timedelta(minutes=minutes), kind, code, comp, "critical"))
    write_rows("jobs", jobs)
    write_rows("job_hosts", alloc)
    write_rows("events", events)
    return CLUSTER


def _named(outcome: str) -> dict[str, tuple[str, str] | None]:
    lo = int(BASE.timestamp())
    chosen, _ = windows.outcome_interruptions(CLUSTER, windows.parse_outcome(outcome), 3600, lo, lo + 5 * 86400,
                                              timeout_s=60)
    units = contrasts.failing_units(CLUSTER, chosen, windows.parse_outcome(outcome), timeout_s=60)
    return {it.job_id: u for it, u in zip(chosen, units)}


@pytest.mark.parametrize("outcome", ["NODE_FAIL", "any interruption"])
def test_a_state_outcome_names_the_part_of_its_own_hardware_event(fleet, outcome):
    named = _named(outcome)
    assert set(named) == set(JOBS)
    assert named == {job_id: want for job_id, (_, _, _, want) in JOBS.items()}


def test_an_outcome_by_event_names_only_its_own_events_part(fleet):
    # XID 79 names the GPU of an XID 79, never the PSU failure or link-down of another interruption
    named = _named("XID 79")
    assert named == {"701": ("s05", "gpu5")}, named
