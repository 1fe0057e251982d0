"""Interruptions inbox queries against a real embedded store."""
from __future__ import annotations

from datetime import timedelta

import pytest

from telemetry.queries import interruptions as it
from telemetry.queries.interruptions import InterruptionQuery

from . import BASE, event_row, write_rows


def job(cluster, job_id, name, state, end, hosts, version=1, n_gpus=None):
    return {"cluster": cluster, "job_id": job_id, "name": name, "user": "u", "partition": "train", "state": state,
            "exit_code": "1:0", "reason": "", "submit_ts": end - timedelta(hours=5), "start_ts": end - timedelta(hours=4),
            "end_ts": end, "n_hosts": len(hosts), "n_gpus": n_gpus if n_gpus is not None else 8 * len(hosts),
            "version": version}


def allocation(cluster, job_id, hosts, end):
    return [{"cluster": cluster, "job_id": job_id, "host": h, "start_ts": end - timedelta(hours=4), "end_ts": end,
             "version": 1} for h in hosts]


@pytest.fixture
def inbox(clean_store):
    t1 = BASE + timedelta(hours=4, minutes=12)
    t2 = BASE + timedelta(days=1, hours=2)
    t3 = BASE + timedelta(days=1, hours=6)
    jobs = [
        job("c1", "100", "llm-405b-7", "NODE_FAIL", t1, ["n1", "n2"]),
        job("c1", "101", "mm-70b-2", "FAILED", t2, ["n3"]),
        job("c1", "102", "llm-8b", "COMPLETED", t3, ["n1"]),
        job("c1", "103", "eval", "CANCELLED", t3, ["n2"]),
        job("c2", "100", "llm-405b-7", "TIMEOUT", t3, ["m1"]),
    ]
    write_rows("jobs", jobs)
    # Job 101 re-reported later as REQUEUED: the newest version wins.
    write_rows("jobs", [job("c1", "101", "mm-70b-2", "REQUEUED", t2, ["n3"], version=2)])
    write_rows("job_hosts", allocation("c1", "100", ["n1", "n2"], t1) + allocation("c1", "101", ["n3"], t2)
               + allocation("c1", "102", ["n1"], t3) + allocation("c2", "100", ["m1"], t3))
    write_rows("events", [
        event_row("c1", "n1", t1 - timedelta(minutes=3), "xid", 79, "gpu3", "critical"),
        event_row("c1", "n1", t1 - timedelta(minutes=2), "xid", 79, "gpu3", "critical"),
        event_row("c1", "n2", t1 - timedelta(minutes=1), "link_down", 0, "mlx5_0/1", "error", source="network"),
        event_row("c1", "n2", t1 - timedelta(seconds=30), "link_down", 0, "mlx5_0/1", "error", source="network"),
        event_row("c1", "n2", t1 + timedelta(seconds=20), "link_up", 0, "mlx5_0/1", "info", source="network"),
        event_row("c1", "n1", t1 - timedelta(minutes=30), "xid", 48, "gpu1", "critical"),  # outside ±10 min
        event_row("c1", "n9", t1, "xid", 31, "gpu0", "error"),  # not a host of the job
        event_row("c2", "n1", t1, "xid", 13, "gpu0", "error"),  # same host name, other cluster
    ])
    return t1, t2, t3


def test_it_lists_abnormal_endings_newest_first(inbox):
    t1, t2, t3 = inbox
    page = it.list_interruptions(InterruptionQuery())
    assert [(r.cluster, r.job_id, r.state) for r in page.rows] == [
        ("c2", "100", "TIMEOUT"), ("c1", "101", "REQUEUED"), ("c1", "100", "NODE_FAIL")]
    assert page.total == 3
    first = page.rows[2]
    assert first.t0 == t1 and first.hosts == ["n1", "n2"] and first.n_hosts == 2


def test_each_row_summarises_the_events_near_t0_on_its_hosts(inbox):
    row = it.list_interruptions(InterruptionQuery(cluster="c1", states=("NODE_FAIL",))).rows[0]
    assert row.xid_codes == [79]
    assert row.link_flaps == 2
    assert row.event_total == 5
    top = row.events[0]
    assert (top.kind, top.code, top.count, top.first_host, top.first_component) == ("xid", 79, 2, "n1", "gpu3")
    assert top.first_offset_s == -180.0
    assert "bus" in top.meaning.lower()
    assert top.label == "XID 79 gpu3@n1 ×2"
    assert [e.kind for e in row.events] == ["xid", "link_down", "link_up"]


def test_filters_search_and_paging(inbox):
    t1, t2, t3 = inbox
    assert [r.job_id for r in it.list_interruptions(InterruptionQuery(search="405B")).rows] == ["100", "100"]
    assert [r.cluster for r in it.list_interruptions(InterruptionQuery(search="101")).rows] == ["c1"]
    window = it.list_interruptions(InterruptionQuery(start=t1 + timedelta(hours=1), end=t3))
    assert [r.job_id for r in window.rows] == ["101"]
    page2 = it.list_interruptions(InterruptionQuery(limit=2, offset=2))
    assert [(r.cluster, r.job_id) for r in page2.rows] == [("c1", "100")] and page2.total == 3
    empty = it.list_interruptions(InterruptionQuery(limit=2, offset=10))
    assert empty.rows == [] and empty.total == 3


def test_job_filters_from_facts_outside_the_store_are_exact_over_all_matches(inbox):
    only = it.list_interruptions(InterruptionQuery(only_jobs=(("c1", "100"), ("c2", "100")), limit=1))
    assert [(r.cluster, r.job_id) for r in only.rows] == [("c2", "100")] and only.total == 2  # counted before paging
    assert it.list_interruptions(InterruptionQuery(only_jobs=())).total == 0  # no cases: nothing has one
    rest = it.list_interruptions(InterruptionQuery(except_jobs=(("c1", "100"),)))
    assert [(r.cluster, r.job_id) for r in rest.rows] == [("c2", "100"), ("c1", "101")] and rest.total == 2


def test_bad_filters_are_named():
    with pytest.raises(ValueError, match="'COMPLETED' not interruption states"):
        it.list_interruptions(InterruptionQuery(states=("COMPLETED",)))
    with pytest.raises(ValueError, match="limit 0"):
        it.list_interruptions(InterruptionQuery(limit=0))


def test_get_interruption(inbox):
    row = it.get_interruption("c1", "100")
    assert row is not None and row.state == "NODE_FAIL" and row.xid_codes == [79]
    assert it.get_interruption("c1", "102") is None  # completed normally
    assert it.get_interruption("c1", "999") is None


def test_counts_by_week_and_state(inbox):
    df = it.counts_by_week_and_state()
    assert set(df.columns) == {"week", "state", "n"}
    assert df["n"].sum() == 3
    assert set(df["state"]) == {"NODE_FAIL", "REQUEUED", "TIMEOUT"}
    assert df.groupby("state")["n"].sum().to_dict() == {"NODE_FAIL": 1, "REQUEUED": 1, "TIMEOUT": 1}
