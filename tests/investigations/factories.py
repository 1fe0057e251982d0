"""Plain functions that make workspace rows for tests (no telemetry needed), plus a helper
that writes a real interruption into the telemetry store for open_case."""
from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone

import pyarrow as pa

from investigations.models import Case, CaseHypothesis, Hypothesis, Verdict
from telemetry import schema, writer

_seq = itertools.count(1)
# Recent enough that the store's TTL never drops it.
BASE = (datetime.now(timezone.utc) - timedelta(days=3)).replace(minute=0, second=0, microsecond=0)


def make_case(opened_by=None, **fields) -> Case:
    n = next(_seq)
    values = {"cluster": "c1", "job_id": f"9{n:05d}", "job_name": f"llm-{n}", "state": "NODE_FAIL",
              "t0": BASE - timedelta(hours=n), "n_hosts": 2, "hosts": [f"n{n:04d}", f"n{n + 1:04d}"],
              "opened_by": opened_by}
    values.update(fields)
    return Case.objects.create(**values)


def make_hypothesis(author=None, *, cases=(), **fields) -> Hypothesis:
    values = {"statement": f"PCIe replays precede XID 79 (#{next(_seq)})", "metric": "gpu.pcie.replay",
              "component_scope": "gpu", "condition": "rate", "operator": ">", "threshold": 5.0,
              "lead_window_s": 6 * 3600, "outcome": "XID 79", "author": author}
    values.update(fields)
    hypothesis = Hypothesis.objects.create(**values)
    for case in cases:
        CaseHypothesis.objects.create(case=case, hypothesis=hypothesis, pinned_by=author)
    return hypothesis


def make_verdict(case, kind="confirmed", *, author=None, hypothesis=None, rationale="looked at the overlay",
                 root_cause="") -> Verdict:
    return Verdict.objects.create(case=case, kind=kind, hypothesis=hypothesis, rationale=rationale,
                                  root_cause=root_cause, author=author)


def write_job(cluster: str, job_id: str, *, state: str = "NODE_FAIL", hosts=("n0001", "n0002"),
              end: datetime | None = None, name: str | None = None) -> datetime:
    """Write one job and its host allocation into the telemetry store; returns its t0."""
    end = end or BASE + timedelta(minutes=next(_seq))
    jobs = {"cluster": [cluster], "job_id": [job_id], "name": [name or f"train-{job_id}"], "user": ["u"],
            "partition": ["train"], "state": [state], "exit_code": ["1:0"], "reason": [""],
            "submit_ts": [end - timedelta(hours=5)], "start_ts": [end - timedelta(hours=4)], "end_ts": [end],
            "n_hosts": [len(hosts)], "n_gpus": [8 * len(hosts)], "version": [1]}
    writer.write("jobs", pa.table(jobs, schema=schema.JOBS))
    alloc = {"cluster": [cluster] * len(hosts), "job_id": [job_id] * len(hosts), "host": list(hosts),
             "start_ts": [end - timedelta(hours=4)] * len(hosts), "end_ts": [end] * len(hosts),
             "version": [1] * len(hosts)}
    writer.write("job_hosts", pa.table(alloc, schema=schema.JOB_HOSTS))
    return end


def client_for(user):
    """A Django test client logged in as ``user``."""
    from django.test import Client

    c = Client()
    c.force_login(user)
    return c


def known_fleet_fixture(cluster: str, seed: int):
    """A module-scoped fixture writing the fleet with a known precursor (test_fleet_test) under
    ``cluster``: each module its own name and seed, so the writer never drops it as a retry."""
    import pytest

    from tests.telemetry.queries.test_fleet_test import write_fleet

    def known_fleet(telemetry_store):
        return write_fleet(cluster, seed=seed)

    return pytest.fixture(scope="module")(known_fleet)
