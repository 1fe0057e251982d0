"""The workspace pages through Django's test client: login redirects, roles (403), bad view
parameters (400), CSRF, escaping of user text, permalinks, and each page rendering real data
from a small fleet written to the embedded store."""
from __future__ import annotations

import base64
import json
import re
import zlib
from datetime import datetime, timedelta, timezone

import numpy as np
import pyarrow as pa
import pytest
from django.test import Client

from investigations.models import AuditEvent, Case, Hypothesis, Verdict
from investigations.services import cases, hypotheses, verdicts
from telemetry import schema, writer

# Recent (inside the store's TTL and the inbox's default 7 days), fixed for the run.
T0 = (datetime.now(timezone.utc) - timedelta(days=1)).replace(minute=12, second=7, microsecond=0)
AFFECTED = ("n01", "n02")
PEERS = ("p01", "p02", "p03", "p04")


def _table(name: str, rows: list[dict]) -> pa.Table:
    target = schema.TABLES[name]
    return pa.table({f.name: pa.array([r.get(f.name) for r in rows], type=f.type) for f in target}, schema=target)


def _samples(cluster, host, component, metric, ts, values) -> dict:
    n = len(ts)
    return {"ts": ts, "cluster": [cluster] * n, "host": [host] * n, "component": [component] * n,
            "metric": [metric] * n, "value": np.asarray(values, dtype=float)}


def write_fleet(cluster: str, job_id: str = "4242", name: str = "llm-405b-7", t0: datetime = T0) -> None:
    """A job that ended NODE_FAIL on two hosts, four healthy peers, samples around t0
    (a rising PCIe replay counter and a hot GPU on n01/gpu3), XID 79 and a link flap, inventory.
    `cluster` varies the contents, so each test module's batches differ (the writer de-duplicates)."""
    start = t0 - timedelta(hours=3)
    ts = [start + timedelta(seconds=30 * i) for i in range(int(3.25 * 3600 / 30))]
    n = len(ts)
    rng = np.random.default_rng(zlib.crc32(cluster.encode()))  # str hash() differs per process
    cols: dict[str, list] = {k: [] for k in ("ts", "cluster", "host", "component", "metric", "value")}

    def add(part):
        for k in cols:
            cols[k].extend(part[k])

    for host in AFFECTED + PEERS:
        for g in range(4):
            comp = f"gpu{g}"
            hot = host == "n01" and g == 3
            temp = 55 + rng.normal(0, 1.5, n) + (np.linspace(0, 30, n) if hot else 0)
            add(_samples(cluster, host, comp, "gpu.temp", ts, temp))
            incr = rng.poisson(40 if hot else 0.2, n)
            add(_samples(cluster, host, comp, "gpu.pcie.replay", ts, np.cumsum(incr)))
        add(_samples(cluster, host, "", "cooling.inlet_temp", ts, 24 + rng.normal(0, 0.3, n)))
    samples = pa.table({"ts": pa.array(cols["ts"], type=schema.TS), "cluster": cols["cluster"], "host": cols["host"],
                        "component": cols["component"], "metric": cols["metric"],
                        "value": pa.array(np.asarray(cols["value"], dtype=float))}, schema=schema.SAMPLES)
    writer.write("samples", samples)
    writer.write("events", _table("events", [
        {"ts": t0 - timedelta(seconds=65), "cluster": cluster, "host": "n01", "component": "gpu3", "source": "kernel",
         "kind": "xid", "code": 79, "severity": "critical", "message": "GPU has fallen off the bus <script>x</script>",
         "attributes": []},
        {"ts": t0 - timedelta(seconds=30), "cluster": cluster, "host": "n02", "component": "mlx5_0/1", "source": "network",
         "kind": "link_down", "code": 0, "severity": "error", "message": "link down", "attributes": []},
    ]))
    job = {"cluster": cluster, "job_id": job_id, "name": name, "user": "trainer", "partition": "gpu",
           "state": "NODE_FAIL", "exit_code": "0:0", "reason": "", "submit_ts": t0 - timedelta(hours=5),
           "start_ts": t0 - timedelta(hours=4), "end_ts": t0, "n_hosts": 2, "n_gpus": 16, "version": 1}
    done = {**job, "job_id": job_id + "1", "name": "ok-job", "state": "COMPLETED", "end_ts": t0 - timedelta(hours=1)}
    writer.write("jobs", _table("jobs", [job, done]))
    writer.write("job_hosts", _table("job_hosts", [
        {"cluster": cluster, "job_id": job_id, "host": h, "start_ts": job["start_ts"], "end_ts": t0, "version": 1}
        for h in AFFECTED]))
    writer.write("hosts", _table("hosts", [
        {"cluster": cluster, "host": h, "rack": f"r{i // 3}", "leaf": f"leaf-{i // 3}", "spine": "spine-1",
         "gpu_model": "H100", "driver_version": "550.54", "firmware_version": "96.00", "updated": t0}
        for i, h in enumerate(AFFECTED + PEERS)]))
    comps = []
    for h in AFFECTED + PEERS:
        for g in range(4):
            comps.append({"cluster": cluster, "host": h, "component": f"gpu{g}", "kind": "gpu", "model": "H100",
                          "serial": f"S{h}{g}", "uuid": "", "pci_bus_id": f"0000:{g + 1:02x}:00.0", "firmware": "96.00",
                          "peer": "", "updated": t0})
        comps.append({"cluster": cluster, "host": h, "component": "mlx5_0/1", "kind": "nic", "model": "CX7",
                      "serial": "", "uuid": "", "pci_bus_id": "0000:a1:00.0", "firmware": "28.39",
                      "peer": "leaf-0:p7", "updated": t0})
    writer.write("components", _table("components", comps))


CLUSTER = "pages"


@pytest.fixture
def fleet(clean_store):
    write_fleet(CLUSTER)
    return CLUSTER


@pytest.fixture
def case(fleet, investigator):
    return cases.open_case(investigator, fleet, "4242")


@pytest.fixture
def viewer_client(viewer):
    c = Client()
    c.force_login(viewer)
    return c


@pytest.fixture
def admin_client(admin_user):
    c = Client()
    c.force_login(admin_user)
    return c


# --- login -----------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/", "/board/", "/cases/1/", "/cases/1/overlay", "/hypotheses/1/", "/audit/", "/jobs/"])
def test_anonymous_users_are_sent_to_login(client, db, path):
    resp = client.get(path)
    assert resp.status_code == 302
    assert resp["Location"].startswith("/login/?next=")


def test_login_page_logs_a_person_in_and_logout_needs_post(client, investigator):
    resp = client.get("/login/")
    assert resp.status_code == 200 and b"Log in to Precursor" in resp.content
    resp = client.post("/login/", {"username": "alice", "password": "correct-horse-1", "next": "/board/"})
    assert resp.status_code == 302 and resp["Location"] == "/board/"
    assert client.get("/board/").status_code == 200
    assert client.get("/logout/").status_code == 405
    client.post("/logout/")
    assert client.get("/board/").status_code == 302


def test_wrong_password_says_so(client, investigator):
    resp = client.post("/login/", {"username": "alice", "password": "nope-nope-1"})
    assert resp.status_code == 200 and b"did not match" in resp.content


# --- inbox -----------------------------------------------------------------------------------

def test_inbox_lists_the_interruption_with_its_nearest_events(alice_client, fleet):
    resp = alice_client.get("/")
    html = resp.content.decode()
    assert resp.status_code == 200 and "Interruptions" in html
    assert "llm-405b-7" in html and "NODE_FAIL" in html
    assert "XID 79 gpu3@n01" in html and "link↓ n02" in html
    assert "<script>x</script>" not in html  # ingested event text never becomes markup
    assert "ok-job" not in html  # COMPLETED is not an interruption
    assert "open case" in html


def test_inbox_filters_by_state_and_case(alice_client, fleet, investigator):
    assert "llm-405b-7" not in alice_client.get("/?state=FAILED").content.decode()
    assert "llm-405b-7" in alice_client.get("/?has_case=no").content.decode()
    cases.open_case(investigator, fleet, "4242")
    assert "llm-405b-7" not in alice_client.get("/?has_case=no").content.decode()
    assert "llm-405b-7" in alice_client.get("/?has_case=yes").content.decode()


def test_inbox_filters_by_the_current_verdicts_cause(alice_client, fleet, investigator):
    case = cases.open_case(investigator, fleet, "4242")
    verdicts.record_verdict(investigator, case, kind="confirmed", root_cause="Faulty GPU", rationale="XID 79")
    assert "llm-405b-7" in alice_client.get("/?root_cause=faulty gpu").content.decode()  # any case
    assert "llm-405b-7" not in alice_client.get("/?root_cause=false positive").content.decode()
    # A false positive names no cause: the inbox counts and filters it as "false positive".
    verdicts.record_verdict(investigator, case, kind="false_positive", rationale="the fan, not the GPU")
    assert "llm-405b-7" in alice_client.get("/?root_cause=false positive").content.decode()
    assert "llm-405b-7" not in alice_client.get("/?root_cause=faulty gpu").content.decode()


def test_inbox_rejects_an_unknown_state_filter(alice_client, fleet):
    resp = alice_client.get("/?state=EXPLODED")
    assert resp.status_code == 400 and b"state" in resp.content


def test_inbox_filters_by_an_absolute_utc_range(alice_client, fleet):
    day, iso = T0.date().isoformat(), T0.strftime("%Y-%m-%dT%H:%M:%S")

    def listed(**params) -> bool:
        resp = alice_client.get("/", params)
        assert resp.status_code == 200, resp.content[:300]
        return "llm-405b-7" in resp.content.decode()

    assert listed(**{"from": day, "to": day})  # a day is the whole UTC day
    assert listed(**{"from": iso + "Z"}) and not listed(**{"from": iso[:-2] + "08"})  # from includes the instant
    assert not listed(to=iso) and listed(to=iso[:-2] + "08")  # to excludes it
    assert listed(**{"from": iso[:-3].replace(":12", ":11") + "-00:00", "to": (T0 + timedelta(minutes=1)).isoformat()})
    assert not listed(**{"from": (T0 + timedelta(days=1)).date().isoformat()})
    # An absolute range replaces the relative one: the day is far outside "last 24h" yet found.
    old = alice_client.get("/", {"range": "24h", "to": (T0 - timedelta(days=3)).date().isoformat()})
    assert "llm-405b-7" not in old.content.decode() and "chosen time range" in old.content.decode()
    bad = alice_client.get("/", {"from": "yesterday"})
    assert bad.status_code == 400 and "from &#x27;yesterday&#x27;: not a day YYYY-MM-DD" in bad.content.decode()
    empty = alice_client.get("/", {"from": day, "to": (T0 - timedelta(days=1)).date().isoformat()})
    assert empty.status_code == 400 and "the range is empty" in empty.content.decode()
    assert alice_client.get("/inbox/chart", {"from": day, "to": day}).status_code == 200


def test_inbox_chart_fragment_draws_weekly_counts(alice_client, fleet, investigator):
    case = cases.open_case(investigator, fleet, "4242")
    hyp = hypotheses.pin_hypothesis(investigator, case=case, statement="x", metric="gpu.temp", component_scope="gpu",
                                    condition="threshold", operator=">", threshold=80, lead_window_s=3600,
                                    outcome="NODE_FAIL")
    verdicts.record_verdict(investigator, case, kind="confirmed", hypothesis=hyp, root_cause="<b>faulty GPU</b>",
                            rationale="temp ran away")
    resp = alice_client.get("/inbox/chart?range=7d")
    html = resp.content.decode()
    assert resp.status_code == 200 and html.count("data-plotly-figure") == 2
    figs = [json.loads(part.split("</script>")[0]) for part in html.split('<script type="application/json">')[1:]]
    assert figs[0]["data"][0]["name"] == "NODE_FAIL"
    assert "<b>" not in html  # the user's root-cause text cannot become markup
    assert figs[1]["data"][0]["name"] == "&lt;b&gt;faulty GPU&lt;/b&gt;"


def test_one_click_opens_the_case_and_a_second_click_finds_it(alice_client, fleet):
    resp = alice_client.post("/interruptions/open", {"cluster": fleet, "job_id": "4242"})
    case = Case.objects.get()
    assert resp.status_code == 302 and resp["Location"] == f"/cases/{case.pk}/"
    resp = alice_client.post("/interruptions/open", {"cluster": fleet, "job_id": "4242"})
    assert resp["Location"] == f"/cases/{case.pk}/" and Case.objects.count() == 1
    assert case.hosts == ["n01", "n02"] and case.state == "NODE_FAIL"


def test_opening_a_job_that_is_no_interruption_is_a_400(alice_client, fleet):
    resp = alice_client.post("/interruptions/open", {"cluster": fleet, "job_id": "42421"})
    assert resp.status_code == 400 and b"not a known interruption" in resp.content


def test_a_viewer_cannot_open_a_case(viewer_client, fleet):
    assert "open case" not in viewer_client.get("/").content.decode()
    assert viewer_client.post("/interruptions/open", {"cluster": fleet, "job_id": "4242"}).status_code == 403
    assert not Case.objects.exists()


# --- case page -------------------------------------------------------------------------------

def test_case_page_shows_the_header_and_loads_its_parts(alice_client, case):
    html = alice_client.get(f"/cases/{case.pk}/").content.decode()
    assert f"Case #{case.pk}" in html and "llm-405b-7" in html and "NODE_FAIL" in html
    assert f"/cases/{case.pk}/topology" in html and f"/cases/{case.pk}/differences" in html
    assert 'id="verdict-form"' in html and 'id="pin-form"' in html
    assert "/static/vendor/plotly-" in html
    # Every script, style and link is Precursor's own (a substring check for "cdn" failed once
    # on a CSRF token that happened to contain those letters).
    urls = re.findall(r'\b(?:src|href)="([^"]*)"', html)
    assert urls and all(u.startswith(("/", "#", "?")) for u in urls), urls


def test_overlay_json_has_lines_band_and_event_markers(alice_client, case):
    sig = "gpu.pcie.replay@n01/gpu3"
    resp = alice_client.get(f"/cases/{case.pk}/overlay", {"w": "-7200,600", "s": sig, "n": "300"})
    assert resp.status_code == 200
    body = resp.json()
    names = [t.get("name", "") for t in body["figure"]["data"]]
    assert "gpu.pcie.replay gpu3@n01" in names
    assert any(n.startswith("peers p5–p95") for n in names) and any(n.startswith("peers median") for n in names)
    assert "XID" in names and "link↓" not in names  # n02's flap is not on a charted host
    assert body["meta"]["peers"] == 4 and body["meta"]["source"] == "samples"
    line = next(t for t in body["figure"]["data"] if t.get("name") == "gpu.pcie.replay gpu3@n01")
    xs = _plotly_array(line["x"])
    assert len(xs) > 10 and xs.min() >= -7200 and xs.max() <= 600  # seconds from t0, inside the window


def _plotly_array(value) -> np.ndarray:
    """A trace array from a figure's JSON: a list, or plotly's typed form {"dtype", "bdata"}."""
    if isinstance(value, dict):
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
    return np.asarray(value, dtype=float)


def test_zooming_in_asks_for_finer_buckets(alice_client, case):
    wide = alice_client.get(f"/cases/{case.pk}/overlay", {"w": "-10800,600", "s": "gpu.temp@n01/gpu3", "n": "100"}).json()
    narrow = alice_client.get(f"/cases/{case.pk}/overlay", {"w": "-1200,0", "s": "gpu.temp@n01/gpu3", "n": "100"}).json()
    assert narrow["meta"]["bucket_s"] < wide["meta"]["bucket_s"]


@pytest.mark.parametrize("params, reason", [
    ({"s": "gpu.tmep@n01/gpu3"}, "not in the metric catalog"),
    ({"s": "gpu.temp@ghost/gpu3"}, "host 'ghost' is not one of the job"),
    ({"s": "gpu.temp@n01/gpu0';DROP TABLE samples"}, "not a valid component name"),
    ({"s": "gpu.temp"}, "expected metric@host"),
    ({"w": "900,-21600", "s": "gpu.temp@n01/gpu3"}, "must be before"),
    ({"w": "abc", "s": "gpu.temp@n01/gpu3"}, "expected two offsets"),
])
def test_overlay_rejects_signals_outside_the_catalog_or_inventory(alice_client, case, params, reason):
    resp = alice_client.get(f"/cases/{case.pk}/overlay", params)
    assert resp.status_code == 400
    assert reason in resp.json()["error"]


@pytest.mark.parametrize("query, reason", [
    ("?s=nope.metric@n01/gpu0", b"not in the metric catalog"),
    ("?s=gpu.temp@ghost/gpu0", b"host 'ghost'"),
    ("?w=1,2,3", b"expected two offsets"),
])
def test_case_permalink_with_a_bad_signal_is_a_400(alice_client, case, query, reason):
    resp = alice_client.get(f"/cases/{case.pk}/{query}")
    assert resp.status_code == 400 and reason in resp.content


def test_permalink_carries_window_and_signals(alice_client, case):
    resp = alice_client.get(f"/cases/{case.pk}/?w=-3600,300&s=DCGM_FI_DEV_GPU_TEMP@n01/gpu3,net.symbol_errors@n02/mlx5_0/1")
    html = resp.content.decode()
    assert resp.status_code == 200
    signals = json.loads(html.split('id="case-signals" type="application/json">')[1].split("</script>")[0])
    # An alias in a pasted link becomes the canonical name, so the link names one thing.
    assert [s["param"] for s in signals] == ["gpu.temp@n01/gpu3", "net.symbol_errors@n02/mlx5_0/1"]
    assert "[-3600, 300]" in html
    assert f"/cases/{case.pk}/?w=-3600,300&amp;s=gpu.temp@n01/gpu3,net.symbol_errors@n02/mlx5_0/1" in html
    assert '<option value="-3600,300" selected>' in html


def test_topology_fragment_walks_job_hosts_gpus_and_nics(alice_client, case):
    html = alice_client.get(f"/cases/{case.pk}/topology").content.decode()
    assert 'data-target="n01/gpu3"' in html and 'data-target="n02/mlx5_0/1"' in html
    assert "leaf-0:p7" in html
    assert "p01" not in html  # peers are not part of the job


def test_differences_fragment_ranks_the_runaway_gpu_first(alice_client, case):
    html = alice_client.get(f"/cases/{case.pk}/differences?w=-10800,900").content.decode()
    first = html.split("<tbody>")[1].split("</tr>")[0]
    assert "gpu3@n01" in first
    assert 'data-signal="gpu.pcie.replay@n01/gpu3"' in html or 'data-signal="gpu.temp@n01/gpu3"' in html


def test_differences_fragment_names_the_default_signals_and_formats_numbers(alice_client, case):
    html = alice_client.get(f"/cases/{case.pk}/differences?w=-10800,900").content.decode()
    defaults = json.loads(html.split('id="diff-defaults" type="application/json">')[1].split("</script>")[0])
    rows = [part.split('"')[0] for part in html.split('<tr data-signal="')[1:]]
    # The best row of each metric in rank order, topped up with the next rows to at least three.
    firsts = [r for i, r in enumerate(rows) if r.split("@")[0] not in {x.split("@")[0] for x in rows[:i]}]
    expected = firsts[:4] + [r for r in rows if r not in firsts[:4]][: max(0, 3 - len(firsts[:4]))]
    assert defaults == sorted(expected, key=rows.index) and 3 <= len(defaults) <= 4
    assert defaults[0] == rows[0] and defaults[0].endswith("@n01/gpu3")
    assert "1000.0σ" not in html and "σ</td>" in html


def test_a_case_opened_without_signals_asks_for_the_defaults_and_an_empty_s_does_not(alice_client, case):
    html = alice_client.get(f"/cases/{case.pk}/").content.decode()
    assert 'data-auto-signals="1"' in html and "Choosing signals" in html
    assert 'data-auto-signals' not in alice_client.get(f"/cases/{case.pk}/?s=").content.decode()
    assert 'data-auto-signals' not in alice_client.get(f"/cases/{case.pk}/?s=gpu.temp@n01/gpu3").content.decode()


def _diff(metric, host, component, score):
    from telemetry.queries.differences import Difference

    return Difference(metric=metric, layer="gpu", unit="", bad="up", host=host, component=component, score=score,
                      z=score, affected_value=1.0, peer_median=0.0, peer_p95=0.0, n_peers=8)


def test_default_signals_prefer_distinct_metrics_then_top_up_to_three():
    from investigations.services.case_signals import default_signals

    rows = [_diff("gpu.pcie.replay", "n01", "gpu3", 90), _diff("gpu.pcie.replay", "n01", "gpu2", 80),
            _diff("gpu.temp", "n01", "gpu3", 40), _diff("gpu.pcie.replay", "n02", "gpu1", 30),
            _diff("gpu.ecc.sbe", "n02", "gpu1", 20), _diff("gpu.power", "n01", "gpu3", 10),
            _diff("gpu.sm_clock", "n01", "gpu3", 5)]
    assert default_signals(rows) == ["gpu.pcie.replay@n01/gpu3", "gpu.temp@n01/gpu3", "gpu.ecc.sbe@n02/gpu1",
                                     "gpu.power@n01/gpu3"]
    # One metric only: the top three rows, in rank order.
    same = [_diff("gpu.pcie.replay", "n01", f"gpu{g}", 10 - g) for g in range(5)]
    assert default_signals(same) == ["gpu.pcie.replay@n01/gpu0", "gpu.pcie.replay@n01/gpu1", "gpu.pcie.replay@n01/gpu2"]
    # Two metrics: both, then the best remaining row, still in rank order.
    two = [_diff("gpu.temp", "n01", "gpu3", 9), _diff("gpu.temp", "n01", "gpu2", 8), _diff("host.x", "n01", "", 7)]
    assert default_signals(two) == ["gpu.temp@n01/gpu3", "gpu.temp@n01/gpu2", "host.x@n01"]
    assert default_signals([]) == []


@pytest.mark.parametrize("z, text", [(1000.0, "≥+100σ"), (-1000.0, "≤−100σ"), (38.4, "+38σ"), (3.34, "+3.3σ"),
                                     (-1.52, "−1.5σ"), (0.0, "+0.0σ"), (99.6, "+100σ")])
def test_z_scores_read_as_sigmas_capped_at_a_hundred(z, text):
    from investigations.templatetags.precursor import fmt_z

    assert fmt_z(z) == text


@pytest.mark.parametrize("v, text", [(0.0, "0"), (0.354, "0.354"), (4.624, "4.62"), (23.258, "23.3"),
                                     (1487.792, "1,488"), (0.000171, "1.7e−4"), (-2.5, "−2.5"), (3.2e9, "3.20e9")])
def test_values_keep_three_significant_digits_and_small_rates_stay_visible(v, text):
    from investigations.templatetags.precursor import fmt_num

    assert fmt_num(v) == text


# --- changes: roles, CSRF, escaping, history -------------------------------------------------

PIN = {"statement": "PCIe replays precede XID 79", "metric": "gpu.pcie.replay", "component_scope": "gpu",
       "condition": "rate", "operator": ">", "threshold": "5", "lead_window_min": "120", "outcome": "XID 79"}


def test_pin_record_verdict_and_see_it_in_history(alice_client, case):
    resp = alice_client.post(f"/cases/{case.pk}/pin", PIN)
    assert resp.status_code == 302
    h = Hypothesis.objects.get()
    assert h.lead_window_s == 7200 and list(h.cases.all()) == [case]
    resp = alice_client.post(f"/cases/{case.pk}/verdict", {"kind": "confirmed", "hypothesis": h.pk,
                                                           "rationale": "replays ran away 40 min before the XID"})
    assert resp.status_code == 302
    alice_client.post(f"/cases/{case.pk}/verdict", {"kind": "inconclusive", "rationale": "second look: unsure"})
    html = alice_client.get(f"/cases/{case.pk}/").content.decode()
    assert html.count('class="superseded"') == 1 and html.count('class="current"') == 1
    assert Verdict.objects.filter(case=case).count() == 2
    verbs = list(AuditEvent.objects.filter(case=case).values_list("verb", flat=True))
    assert verbs.count("verdict.recorded") == 2 and "hypothesis.pinned" in verbs


def test_forms_return_to_the_view_they_were_sent_from(alice_client, case):
    view = f"/cases/{case.pk}/?w=-3600,300&s=gpu.temp@n01/gpu3"
    resp = alice_client.post(f"/cases/{case.pk}/comment", {"body": "look here", "next": view})
    assert resp["Location"] == view + "#comments"
    resp = alice_client.post(f"/cases/{case.pk}/comment", {"body": "again", "next": "https://evil.example/"})
    assert resp["Location"] == f"/cases/{case.pk}/#comments"


def test_a_verdict_needs_a_rationale(alice_client, case):
    resp = alice_client.post(f"/cases/{case.pk}/verdict", {"kind": "false_positive", "rationale": "  "})
    assert resp.status_code == 400 and b"rationale" in resp.content.lower()
    assert not Verdict.objects.exists()


def test_a_viewer_sees_no_verdict_button_and_a_post_is_refused(viewer_client, case):
    html = viewer_client.get(f"/cases/{case.pk}/").content.decode()
    assert 'id="verdict-form"' not in html and "record verdict" not in html and 'id="pin-form"' not in html
    resp = viewer_client.post(f"/cases/{case.pk}/verdict", {"kind": "confirmed", "root_cause": "x", "rationale": "y"})
    assert resp.status_code == 403
    assert viewer_client.post(f"/cases/{case.pk}/pin", PIN).status_code == 403
    assert viewer_client.post(f"/cases/{case.pk}/comment", {"body": "hi"}).status_code == 403
    assert not Verdict.objects.exists() and not Hypothesis.objects.exists()


def test_posts_without_a_csrf_token_are_refused(investigator, case):
    c = Client(enforce_csrf_checks=True)
    c.force_login(investigator)
    resp = c.post(f"/cases/{case.pk}/verdict", {"kind": "confirmed", "root_cause": "x", "rationale": "y"})
    assert resp.status_code == 403 and b"CSRF" in resp.content
    page = c.get(f"/cases/{case.pk}/")
    token = page.cookies["csrftoken"].value
    resp = c.post(f"/cases/{case.pk}/verdict", {"kind": "confirmed", "root_cause": "x", "rationale": "y",
                                               "csrfmiddlewaretoken": token})
    assert resp.status_code == 302 and Verdict.objects.count() == 1


def test_markup_in_hypothesis_and_comment_text_is_escaped(alice_client, case):
    evil = '<img src=x onerror="alert(1)"><script>alert(2)</script>'
    alice_client.post(f"/cases/{case.pk}/pin", {**PIN, "statement": evil})
    alice_client.post(f"/cases/{case.pk}/comment", {"body": evil})
    h = Hypothesis.objects.get()
    for url in (f"/cases/{case.pk}/", "/board/", f"/hypotheses/{h.pk}/"):
        html = alice_client.get(url).content.decode()
        assert "<script>alert(2)" not in html and "<img src=x" not in html, url
        assert "&lt;script&gt;alert(2)" in html or "&lt;img src=x" in html, url


# --- board, hypothesis, search, audit --------------------------------------------------------

def test_board_lists_hypotheses_with_track_record_and_sorts(alice_client, case, investigator):
    h1 = hypotheses.pin_hypothesis(investigator, case=case, statement="first idea", metric="gpu.temp",
                                   component_scope="gpu", condition="threshold", operator=">", threshold=85,
                                   lead_window_s=3600, outcome="NODE_FAIL")
    hypotheses.pin_hypothesis(investigator, statement="second idea", metric="net.symbol_errors",
                              component_scope="nic", condition="rate", operator=">", threshold=1,
                              lead_window_s=600, outcome="NCCL timeout")
    verdicts.record_verdict(investigator, case, kind="confirmed", hypothesis=h1, rationale="hot")
    html = alice_client.get("/board/?sort=id").content.decode()
    assert html.index("first idea") < html.index("second idea")
    row = html.split(f'data-hypothesis="{h1.pk}"')[1].split("</tr>")[0]
    assert "✓1" in row and "✗0" in row and "%" in row and "[" in row  # precision with its interval
    html = alice_client.get("/board/?q=symbol").content.decode()
    assert "second idea" in html and "first idea" not in html
    assert alice_client.get("/board/?sort=bogus").status_code == 400


def test_hypothesis_page_shows_cases_comments_history(alice_client, case, investigator):
    h = hypotheses.pin_hypothesis(investigator, case=case, statement="hot GPUs fail", metric="gpu.temp",
                                  component_scope="gpu", condition="threshold", operator=">", threshold=85,
                                  lead_window_s=3600, outcome="NODE_FAIL")
    alice_client.post(f"/hypotheses/{h.pk}/comment", {"body": "seen twice this week"})
    alice_client.post(f"/hypotheses/{h.pk}/status", {"status": "testing"})
    html = alice_client.get(f"/hypotheses/{h.pk}/").content.decode()
    assert f"#{case.pk}" in html and "seen twice this week" in html
    assert "hypothesis.status_changed" in html and "hypothesis.pinned" in html
    h.refresh_from_db()
    assert h.status == "testing"


def test_search_jumps_to_a_hypothesis_or_case(alice_client, case, investigator):
    h = hypotheses.pin_hypothesis(investigator, case=case, statement="s", metric="gpu.temp", component_scope="gpu",
                                  condition="threshold", operator=">", threshold=85, lead_window_s=60, outcome="x")
    assert alice_client.get(f"/search/?q=H{h.pk}")["Location"] == f"/hypotheses/{h.pk}/"
    assert alice_client.get(f"/search/?q=%23{case.pk}")["Location"] == f"/cases/{case.pk}/"
    assert "llm-405b-7" in alice_client.get("/search/?q=llm").content.decode()


def test_audit_log_is_for_admins_only(alice_client, admin_client, case):
    assert alice_client.get("/audit/").status_code == 403
    html = admin_client.get("/audit/").content.decode()
    assert "case.opened" in html and "alice" in html
    assert 'href="/audit/"' in html  # the nav shows the link to admins
    assert 'href="/audit/"' not in alice_client.get("/board/").content.decode()


def test_the_audit_link_follows_the_admin_role_not_the_superuser_flag(make_user, db):
    """An admin made by adding the user to the 'admin' group in /admin/ (no superuser flag)."""
    from django.contrib.auth.models import Group

    carol = make_user("carol", "viewer")
    carol.groups.set([Group.objects.get_or_create(name="admin")[0]])
    c = Client()
    c.force_login(carol)
    assert 'href="/audit/"' in c.get("/board/").content.decode()
    assert c.get("/audit/").status_code == 200


def test_jobs_list_and_job_page_still_work(alice_client, db):
    from investigations.models import BackgroundJob

    job = BackgroundJob.objects.create(kind="engine_selfcheck", stage="scanning metric 3/9", progress_total=9,
                                       progress_done=3, state="running")
    assert f"/jobs/{job.pk}/" in alice_client.get("/jobs/").content.decode()
    assert b"scanning metric 3/9" in alice_client.get(f"/jobs/{job.pk}/progress").content


# --- assets ----------------------------------------------------------------------------------

def test_plotly_is_served_locally_with_long_cache_headers(client, db):
    import plotly

    url = f"/static/vendor/plotly-{plotly.__version__}.min.js"
    resp = client.get(url, HTTP_ACCEPT_ENCODING="gzip")
    assert resp.status_code == 200  # no login needed for a public library
    assert resp["Content-Encoding"] == "gzip" and "immutable" in resp["Cache-Control"]
    assert resp["Content-Type"].startswith("text/javascript")
    etag = resp["ETag"]
    assert client.get(url, HTTP_IF_NONE_MATCH=etag).status_code == 304
    assert client.get("/static/vendor/plotly-0.0.1.min.js").status_code == 404


def test_our_static_files_are_served_without_a_proxy(client, db):
    resp = client.get("/static/precursor/case.js")
    assert resp.status_code == 200 and b"Plotly.react" in b"".join(resp.streaming_content if resp.streaming else [resp.content])
    assert "max-age=3600" in resp["Cache-Control"] and "immutable" not in resp["Cache-Control"]
    assert client.get("/static/../settings.py").status_code == 404


def test_case_filters_count_every_match_and_past_the_last_page_there_is_a_way_back(alice_client, fleet, investigator):
    from datetime import timedelta

    from investigations.services import inbox as inbox_service
    from tests.telemetry.queries import write_rows

    # 60 more failed jobs, older than the first: more than one page (50) of matches
    jobs = [{"cluster": fleet, "job_id": f"9{i:03d}", "name": f"old-{i}", "user": "u", "partition": "p",
             "state": "FAILED", "exit_code": "1:0", "reason": "", "submit_ts": T0 - timedelta(hours=3 + i),
             "start_ts": T0 - timedelta(hours=3 + i), "end_ts": T0 - timedelta(hours=2 + i), "n_hosts": 1,
             "n_gpus": 8, "version": 1} for i in range(60)]
    write_rows("jobs", jobs)
    for i in (1, 55, 59):  # cases on jobs far down the list
        cases.open_case(investigator, fleet, f"9{i:03d}")
    page = inbox_service.inbox_page(inbox_service.InboxFilter(span_s=None, has_case="yes"))
    assert page.total == 3 and {r.item.job_id for r in page.rows} == {"9001", "9055", "9059"} and page.scanned_all
    no_case = inbox_service.inbox_page(inbox_service.InboxFilter(span_s=None, has_case="no", page_no=2))
    assert no_case.total == 58 and len(no_case.rows) == 8
    body = alice_client.get("/?range=all&has_case=no&page=5").content.decode()
    assert "Past the last page: 58 interruptions match." in body and "Back to the first page" in body


# --- display time zone -----------------------------------------------------------------------

def test_the_same_inbox_row_renders_in_utc_and_in_the_chosen_zone(alice_client, fleet, investigator):
    from zoneinfo import ZoneInfo

    def t0_cell() -> str:
        html = alice_client.get("/").content.decode()
        return html.split('<td class="mono nowrap" title="')[1].split("</td>")[0]

    utc = t0_cell()
    assert T0.strftime("%Y-%m-%d %H:%M:%S UTC (+0000)") in utc and T0.strftime("%m-%d %H:%M:%S UTC") in utc
    resp = alice_client.post("/account/tz", {"tz": "America/Los_Angeles", "next": "/"})
    assert resp.status_code == 302 and resp["Location"] == "/"
    la = T0.astimezone(ZoneInfo("America/Los_Angeles"))
    abbr, offset = la.strftime("%Z"), la.strftime("%z")
    assert abbr in ("PST", "PDT") and offset in ("-0800", "-0700")
    shown = t0_cell()
    assert la.strftime(f"%Y-%m-%d %H:%M:%S {abbr} ({offset})") in shown
    assert la.strftime(f"%m-%d %H:%M:%S {abbr}") in shown and "UTC" not in shown
    case_id = cases.open_case(investigator, fleet, "4242").pk
    case_html = alice_client.get(f"/cases/{case_id}/").content.decode()
    assert la.strftime(f"%Y-%m-%d %H:%M:%S {abbr}</b>") in case_html and f"({offset})" in case_html
    # An unknown zone is refused with a message; the chosen zone stays.
    page = alice_client.post("/account/tz", {"tz": "Mars/Olympus_Mons", "next": "/"}, follow=True).content.decode()
    assert "Unknown time zone &#x27;Mars/Olympus_Mons&#x27;" in page and abbr in t0_cell()
    alice_client.post("/account/tz", {"tz": "UTC", "next": "/"})
    assert t0_cell() == utc
