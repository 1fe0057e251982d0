"""A small simulated fleet in the store: precursors visible at onset, red herrings
and false alarms present, same seed same data, manifest format, command errors."""
import hashlib
import json
from datetime import datetime, timezone

import numpy as np
import pytest

from telemetry.simulator import Manifest, SimConfig, generate, simulate
from telemetry.simulator.manifest import FORMAT, parse_iso

pytestmark = pytest.mark.slow  # see ./precursor test --fast

START = datetime(2026, 11, 20, tzinfo=timezone.utc)


def small(seed=7, **kw):
    return SimConfig(**{"hosts": 12, "days": 1.5, "interval_s": 120, "seed": seed, "start": START,
                        "failure_scale": 400.0, "cluster": f"t{seed}", **kw})


def digest(cfg):
    h = hashlib.sha256()
    for name, table in generate(cfg):
        h.update(name.encode())
        for col in table.columns:
            h.update(str(col.to_pylist()[:50]).encode())
            if col.type == "double":
                h.update(np.asarray(col.to_numpy()).tobytes())
        h.update(str(table.num_rows).encode())
    return h.hexdigest()


def test_same_seed_gives_identical_data_and_another_seed_differs():
    cfg = small(seed=3, days=0.5)
    assert digest(cfg) == digest(cfg)
    assert digest(cfg) != digest(small(seed=4, days=0.5, cluster="t3"))


@pytest.fixture(scope="module")
def loaded(django_db_blocker):
    from telemetry import migrate, store
    with django_db_blocker.unblock():
        from django.conf import settings
        migrate.migrate(store.get_client(), migrate.Target(ttl_days=settings.TELEMETRY_TTL_DAYS), log=lambda m: None)
    cfg = small()
    manifest = simulate(cfg)
    return cfg, manifest, store


def _values(store, cfg, metric, host, component, a, b):
    return store.query_rows(
        "SELECT ts, value FROM samples WHERE cluster = {c:String} AND metric = {m:String} AND host = {h:String} "
        "AND component = {k:String} AND ts >= {a:DateTime64(3)} AND ts <= {b:DateTime64(3)} ORDER BY ts",
        {"c": cfg.cluster, "m": metric, "h": host, "k": component, "a": a, "b": b}, tag="test")


def test_the_manifest_has_the_documented_format(loaded, tmp_path):
    cfg, manifest, _ = loaded
    data = json.loads(manifest.write(tmp_path / "m.json").read_text())
    assert data["format"] == FORMAT
    assert set(data) >= {"config", "counts", "cause_weights", "failures", "false_alarms", "red_herrings"}
    assert data["config"]["seed"] == cfg.seed and data["cause_weights"]["faulty_gpu"] == 148
    for f in data["failures"]:
        assert set(f) >= {"id", "cause", "host", "component", "t0", "job_id", "job_state", "signals", "has_precursor"}
        for s in f["signals"]:
            assert set(s) >= {"metric", "host", "component", "shape", "onset"}
    assert data["counts"]["interruptions"] == len(data["failures"]) > 0


def test_every_manifest_precursor_is_visible_in_the_store_at_its_onset(loaded):
    from datetime import timedelta
    cfg, manifest, store = loaded
    signals = manifest.signals
    assert any(s["metric"].startswith("gpu.") for s in signals)
    checked = 0
    for s in signals:
        onset = parse_iso(s["onset"])
        if s["metric"].startswith("event:"):
            rows = store.query_rows(
                "SELECT count() FROM events WHERE cluster = {c:String} AND host = {h:String} AND kind = {k:String} "
                "AND ts = {t:DateTime64(3)}",
                {"c": cfg.cluster, "h": s["host"], "k": s["metric"].split(":")[1], "t": onset}, tag="test")
            assert rows[0][0] >= 1, s
            continue
        before = _values(store, cfg, s["metric"], s["host"], s["component"], onset - timedelta(minutes=30),
                         onset - timedelta(milliseconds=1))
        at = _values(store, cfg, s["metric"], s["host"], s["component"], onset, onset)
        assert at, f"no sample at onset: {s}"
        assert before, f"no baseline before onset: {s}"
        v, prior = at[0][1], np.array([r[1] for r in before])
        if s["shape"] in ("counter_ramp", "throttle", "flaps") and s["metric"] != "power.psu_status":
            jump = v - prior[-1]
            normal = np.diff(prior).max() if len(prior) > 1 else 0
            assert jump > normal, s
        elif s["shape"] == "flag":
            assert prior.max() == 0 and v == 1, s
        elif s["metric"] == "power.psu_status":
            assert prior.min() == 1 and v == 0, s
        else:
            med = np.median(prior)
            spread = max(np.median(np.abs(prior - med)) * 4, 0.1 * abs(med), 0.5)
            assert abs(v - med) > spread, s
        checked += 1
    assert checked > 0


def test_red_herrings_and_false_alarms_are_in_the_manifest_and_the_data(loaded):
    cfg, manifest, store = loaded
    kinds = {r["kind"] for r in manifest.red_herrings}
    assert "firmware_over_representation" in kinds
    assert kinds & {"heavy_phase_before_failure", "checkpoint_before_failure"}
    assert manifest.false_alarms
    # a false alarm is followed by no failure on its host
    failed = {(f["host"]) for f in manifest.failures}
    for alarm in manifest.false_alarms:
        later = [f for f in manifest.failures if f["host"] == alarm["host"] and
                 parse_iso(alarm["onset"]) <= parse_iso(f["t0"]) <= parse_iso(alarm["end"])]
        assert not later
    assert failed
    # a checkpoint red herring shows as a frontend write burst before t0
    for r in manifest.red_herrings:
        if r["kind"] == "checkpoint_before_failure" and parse_iso(r["start"]) > START:
            rows = _values(store, cfg, "net.tx_bytes", r["hosts"][0], "mlx5_8/1", parse_iso(r["start"]),
                           parse_iso(r["end"]))
            if len(rows) >= 2:
                rate = (rows[-1][1] - rows[0][1]) / max(1, (rows[-1][0] - rows[0][0]).total_seconds())
                assert rate > 1e9
                return


def test_counters_only_go_up_except_at_reboots(loaded):
    cfg, manifest, store = loaded
    rows = store.query_rows(
        "SELECT host, component, countIf(d < 0) FROM (SELECT host, component, "
        "value - lagInFrame(value) OVER (PARTITION BY host, component ORDER BY ts) AS d, "
        "row_number() OVER (PARTITION BY host, component ORDER BY ts) AS n "
        "FROM samples WHERE cluster = {c:String} AND metric = 'net.rx_bytes') WHERE n > 1 GROUP BY host, component",
        {"c": cfg.cluster}, tag="test")
    down_hosts = {f["host"] for f in manifest.failures if f["down_until"]}
    assert rows
    for host, comp, drops in rows:
        assert drops == 0 or host in down_hosts, (host, comp, drops)
