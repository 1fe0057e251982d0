"""Events by host, component, code and time, with the "without a job" lane, weekly counts,
host search and the host summary, against a real embedded store."""
from __future__ import annotations

from datetime import timedelta

import pytest

from telemetry.queries import events as ev
from telemetry.queries.events import EventQuery

from . import BASE, event_row, host_row, write_rows


@pytest.fixture
def history(clean_store):
    t = BASE + timedelta(hours=1)
    write_rows("events", [
        event_row("c1", "n1", t, "xid", 79, component="gpu3", message="fallen off the bus"),
        event_row("c1", "n1", t + timedelta(hours=2), "xid", 48, component="gpu1", message="DBE"),
        event_row("c1", "n2", t + timedelta(days=8), "link_down", component="mlx5_0", message="Link down"),
        event_row("c1", "n2", t + timedelta(days=8, minutes=1), "link_up", component="mlx5_0", message="Link up"),
        event_row("c1", "n1", t + timedelta(days=9), "job_state", message="FAILED"),  # scheduler noise: not listed
        event_row("c2", "gpu-b17", t, "xid", 79, component="gpu0"),
    ])
    # a job held n1 around the first XID only
    write_rows("job_hosts", [{"cluster": "c1", "job_id": "7", "host": "n1", "start_ts": t - timedelta(hours=1),
                              "end_ts": t + timedelta(hours=1), "version": 1}])
    write_rows("jobs", [{"cluster": "c1", "job_id": "7", "name": "train", "user": "u", "partition": "p",
                         "state": "FAILED", "exit_code": "1:0", "reason": "", "submit_ts": t - timedelta(hours=2),
                         "start_ts": t - timedelta(hours=1), "end_ts": t + timedelta(hours=1), "n_hosts": 1,
                         "n_gpus": 8, "version": 1}])
    write_rows("hosts", [host_row("c1", "n1")])
    return t


def test_every_event_is_listed_newest_first_with_filters(history):
    page = ev.list_events(EventQuery())
    assert page.total == 5 and [r.kind for r in page.rows][:2] == ["link_up", "link_down"]
    assert [r.code for r in ev.list_events(EventQuery(cluster="c1", kinds=("xid",))).rows] == [48, 79]
    gpu3 = ev.list_events(EventQuery(host="n1", component="gpu3")).rows
    assert [(r.code, r.label) for r in gpu3] == [(79, "XID 79 — " + gpu3[0].label.split(" — ", 1)[1])]
    assert "bus" in gpu3[0].label.lower()
    assert ev.list_events(EventQuery(codes=(79,))).total == 2
    window = ev.list_events(EventQuery(start=history + timedelta(days=1)))
    assert {r.kind for r in window.rows} == {"link_down", "link_up"}
    paged = ev.list_events(EventQuery(limit=2, offset=4))
    assert len(paged.rows) == 1 and paged.total == 5


def test_events_without_a_job_are_those_no_allocation_covers(history):
    marked = {(r.host, r.kind, r.code): r.in_job for r in ev.list_events(EventQuery()).rows}
    assert marked[("n1", "xid", 79)] is True and marked[("n1", "xid", 48)] is False
    lane = ev.list_events(EventQuery(without_job=True))
    assert lane.total == 4 and ("n1", 79) not in {(r.host, r.code) for r in lane.rows if r.kind == "xid"}


def test_weekly_counts_by_kind(history):
    weeks = ev.weekly_counts(EventQuery(cluster="c1"))
    assert sum(n for _, _, n in weeks) == 4
    assert {k for _, k, _ in weeks} == {"xid", "link_down", "link_up"}
    assert all(len(w) == 10 for w, _, _ in weeks)


def test_search_finds_hosts_and_the_host_summary_has_inventory_jobs_and_counts(history):
    assert ev.hosts_matching("B17") == [("c2", "gpu-b17")]
    assert ev.hosts_matching("n1")[0] == ("c1", "n1")
    assert ev.hosts_matching("") == []
    summary = ev.host_summary("c1", "n1")
    assert summary.inventory["gpu_model"] == "H100" and summary.inventory["rack"] == "r1"
    assert [j["job_id"] for j in summary.jobs] == ["7"]
    assert sorted(summary.event_counts) == [("xid", 48, 1), ("xid", 79, 1)]


def test_bad_paging_is_named():
    with pytest.raises(ValueError, match="limit 0"):
        ev.list_events(EventQuery(limit=0))
