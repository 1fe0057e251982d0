"""A metric stored under a name the catalog did not know, mapped afterwards to a user metric,
is a row of the signal scan and a feature of the export windows, without re-ingesting."""
from __future__ import annotations

import numpy as np
import pytest

from telemetry import catalog_store, store
from telemetry.queries import signal_scan, windows

from . import BASE, every, write_samples
from .test_fleet_test import FAILURES, HOSTS, N, STEP, write_fleet


@pytest.fixture
def mapped_fleet(clean_store):
    store.command("TRUNCATE TABLE IF EXISTS metric_catalog")
    catalog_store.refresh(force=True)
    cluster = write_fleet("user-metric", seed=11)
    ts = every(BASE, STEP, N)
    minutes = np.arange(N)
    for host in HOSTS:
        free = np.full(N, 80.0)
        for fh, hours in FAILURES:
            if fh == host:  # free memory drains in the three hours before each failure
                ramp = (minutes >= hours * 60 - 180) & (minutes < hours * 60)
                free -= ramp * 50.0
        write_samples(cluster, host, "gpu0", "site_gpu_free", ts, free)
    yield cluster
    store.command("TRUNCATE TABLE IF EXISTS metric_catalog")
    catalog_store.refresh(force=True)


@pytest.mark.slow  # an 8-day fleet and a scan (see ./precursor test --fast)
def test_a_mapped_user_metric_is_scanned_and_exported(mapped_fleet):
    assert "site_gpu_free" not in [m for m, _, _ in windows.metrics_present(mapped_fleet)]  # unknown: skipped
    catalog_store.add_metric("gpu.site_free_pct", layer="gpu", unit="%", kind="gauge", bad="down", component="gpu",
                             description="Free GPU memory (site exporter)", actor="test")
    _, moved = catalog_store.add_alias("site_gpu_free", "gpu.site_free_pct", actor="test")
    assert moved == len(HOSTS) * N
    assert "gpu.site_free_pct" in [m for m, _, _ in windows.metrics_present(mapped_fleet)]  # export feature columns
    r = signal_scan.scan(windows.parse_outcome("NODE_FAIL"), 6 * 3600, clusters=[mapped_fleet])
    row = next(x for x in r["rows"] if x["metric"] == "gpu.site_free_pct")  # a scan row
    assert row["n_before"] == 6 and row["median_before"] < row["median_control"]
