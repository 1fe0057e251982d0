"""Analysis engine on a realistic fleet: does the signal scan find each failure class's true
precursor, and does the fleet test of the finding hold up?

Builds once (and reuses; ``--rebuild`` regenerates, ``--no-keep`` deletes it afterwards) a fleet of
the simulator's ``realistic`` scenario in its own cluster ``bench-analysis`` — by default 48 hosts x
10 days at 300 s, failure scale 20: ~127 M samples — through the normal writer, with its
ground-truth manifest beside it (``<PRECURSOR_DATA_DIR>/ground-truth/bench-analysis.json``).

Then, for every root-cause class that has precursors in the manifest:

1. the product's signal scan (``telemetry.queries.signal_scan.scan``, the runner the scan job
   calls) on the outcome form the product offers for that class (``OUTCOMES``: the class's
   terminal XIDs where it has them, else its Slurm state) over a ``--lead-hours`` window (6 h).
   Classes sharing an outcome share one scan;
2. the product's pin rule on the scan's row of the class's true precursor (the first metric of its
   chain in the simulator), ``telemetry.rules.pin_rule`` as ``investigations.services.scans.pin_finding``
   calls it: a rule past the 95th percentile of what it reads in the scan's control windows
   (``rules.PIN_QUANTILE``; a rule that passes in at most 5 % of them by construction), refused
   with fewer than 20 control windows or in the metric's good direction. Which rule follows what
   the scan tested: where the outcome names no part (NODE_FAIL), ``rise`` (the part's score against
   its own baseline, the scan's statistic there); where it names the failing part (the XIDs), the
   scan compared that part's level, and the rule is ``rate`` (a counter) or ``threshold`` (a gauge)
   on the highest reading of any part of the window's hosts — unless ``rise``, set the same way,
   passes before more of the scan's windows before the outcome (``pin_basis`` in the per-class
   figures says which, with the other rule's share beside it as ``rival``);
3. the product's fleet test of that hypothesis (``telemetry.queries.fleet_test.run``).

Printed figures (``--json``: one object):

- ``classes_with_precursor``; ``scan_top3_recall``: share of them whose true precursor ranks in
  the scan's top 3; beside it (never instead) ``scan_top3_recall_past_true_rows``: the same once
  the rows above it that carry a precursor of a cause in that outcome are passed over (its mirrors,
  its chain's later steps — a network failure's link flaps — or another class's precursor sharing
  the outcome: hbm3's DRAM counter before XID 48); per class ``rank_past_true_rows``;
- ``true_hypotheses_min_lift`` / ``true_hypotheses_max_p``: the weakest of the fleet tests;
- ``false_discovery_rate``: findings at q < 0.05 that are not a true precursor, over all findings
  at q < 0.05, over the distinct scans. A finding is true when its metric carries the precursor of
  a cause whose interruptions are in that scan's outcome (the chain's metrics and the counters
  that count the same events: ``TRUE_METRICS``); confounders count as false;
- ``confounders_above_true``: classes where a workload-driven metric (power, temperatures,
  traffic, I/O, ... : everything in the haystack that is neither an error counter nor a precursor)
  that the scan tested ranks above the true precursor (a row the scan could not test has no rank:
  the untested come last in alphabetical order); ``false_findings`` lists the findings at q < 0.05
  that are not true (outcome, metric, q, AUC, whether workload-driven, the scan's flags);
- ``alarm_precision`` and ``false_alarms_per_1000_node_days``: the true hypotheses' rules, pooled
  (alarms while the host ran a job; ``idle_alarms``, beside them, those the same firings would have
  opened on hosts running no job, which the fleet test does not count);
- ``true_hypotheses_underpowered_tests``: classes whose fleet test could not show p < 0.01 even
  had the rule fired before every failure (``power.best_p`` of the fleet test: too few windows
  before the outcome), and ``true_hypotheses_max_p_powered``, the weakest p over the others
  (beside, never instead of, ``true_hypotheses_max_p``); ``true_hypotheses_zero_recall``: classes
  whose rule fired before none of their failures — their lift is the ratio with ½ added to every
  cell (the fleet test's convention for an empty cell), not evidence of anything;
- ``scan_seconds`` (slowest scan), ``metrics_scanned``, ``samples_in_store`` (the whole store),
  ``peak_rss_mb`` (the process's peak; it includes the build when this run built the fleet);
- ``classes_underpowered``: classes with fewer than ``MIN_POWERED`` interrupted failures carrying a
  precursor, and ``scan_top3_recall_powered``, the recall over the other classes (beside, never
  instead of, ``scan_top3_recall``);
- ``classes``: the per-class breakdown.

Beside these, never instead (``--causes``, the default; ``--no-causes`` skips them): the same scan
before each class's *cause* — the outcome "cause: <class>" the product offers once engineers have
confirmed causes on cases (investigations.services.causes) — here as if every interrupted failure's
case had a confirmed verdict naming its cause (the manifest's; an upper bound on what verdicts give):
``scan_top3_recall_by_cause`` and ``..._past_true_rows`` (per class ``by_cause``: interruptions
labelled, rank, AUC, q), ``false_discovery_rate_by_cause`` over those scans, and
``cause_scan_seconds`` (slowest).

Nothing here is tuned to the engine: the scenario is the simulator's, the outcome forms, pin rule
and tests are the product's.
"""
from __future__ import annotations

import json
import resource
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from telemetry import catalog, migrate, rules, store
from telemetry.queries import fleet_test, signal_scan, windows
from telemetry.simulator import SimConfig, simulate
from telemetry.simulator.haystack import ERROR_FAMILY, SERIES
from telemetry.simulator.manifest import Manifest
from telemetry.simulator.realistic import CHAINS, TRUE_PRECURSOR

CLUSTER = "bench-analysis"
TABLES = ("samples", "samples_1m", "band_1m", "events", "jobs", "job_hosts", "hosts", "components", "series_labels")
MIN_SAMPLES = 100_000_000
Q_FINDING = 0.05
# A class with fewer interrupted failures that carry a precursor than this is reported as
# underpowered (``classes_underpowered``): no test can tell its precursor from noise, whatever the
# engine. ``scan_top3_recall`` still counts it; ``scan_top3_recall_powered`` shows the rest beside it.
MIN_POWERED = 5

# The outcome form the product offers for each class (telemetry.queries.windows.parse_outcome):
# its terminal XIDs where it has them, a link-down at t0 for the network classes, else the Slurm
# state its interrupted jobs end in.
OUTCOMES = {"faulty_gpu": "XID 74/79", "hbm3": "XID 94/95", "gpu_sram": "XID 48", "network": "link down",
            "nic": "link down", "thermal": "NODE_FAIL", "psu": "NODE_FAIL"}
# counters that count the same events as a chain metric (the simulator writes them together)
MIRRORS = {
    "gpu.ecc.dram_sbe_volatile": ("gpu.ecc.sbe_volatile", "gpu.ecc.sbe_aggregate", "gpu.retired_pages.sbe"),
    "gpu.ecc.sram_sbe_volatile": ("gpu.ecc.sbe_volatile", "gpu.ecc.sbe_aggregate"),
    "gpu.row_remap.pending": ("gpu.row_remap.correctable", "gpu.xid_count"),
    "net.link_down": ("net.carrier_changes", "ib.link_downed", "ib.link_error_recovery"),
    "net.symbol_errors": ("ib.symbol_errors", "ib.port_rcv_errors"),
    "gpu.temp": ("gpu.mem_temp", "gpu.temp_margin", "gpu.sm_clock", "cooling.fan_rpm"),
    "gpu.throttle.thermal_ns": ("gpu.clock_event.sw_thermal_ns", "gpu.clock_event.hw_thermal_ns", "gpu.sm_clock",
                                "gpu.clock_event_reasons", "job.step_time_s", "job.throughput", "job.mfu"),
    "power.psu_status": ("power.psu_input_power", "power.psu_output_power", "power.psu_input_voltage"),
}
TRUE_METRICS = {cause: frozenset(m for _, steps in chains for s in steps for m in (s.metric, *MIRRORS.get(s.metric, ())))
                for cause, chains in CHAINS.items()}
_PRECURSOR_ANY = frozenset().union(*TRUE_METRICS.values())
WORKLOAD_METRICS = frozenset(m for m, _ in SERIES if m not in ERROR_FAMILY and m not in _PRECURSOR_ANY
                             and m not in ("host.boot_time", "job.nccl_timeouts", "job.restarts", "host.oom_kills"))


def add_arguments(parser) -> None:
    parser.add_argument("--hosts", type=int, default=48, help="hosts of the fleet (default %(default)s)")
    parser.add_argument("--days", type=float, default=10.0, help="days of the fleet (default %(default)s)")
    parser.add_argument("--interval", type=int, default=300, help="seconds between samples (default %(default)s)")
    parser.add_argument("--failure-scale", type=float, default=20.0, help="x Llama 3 rate (default %(default)s)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lead-hours", type=float, default=6.0, help="the scan's lead window (default %(default)s h)")
    parser.add_argument("--min-samples", type=int, default=MIN_SAMPLES,
                        help="refuse to measure on fewer samples in the store (default %(default)s)")
    parser.add_argument("--rebuild", action="store_true", help="regenerate the fleet")
    parser.add_argument("--keep", action=__import__("argparse").BooleanOptionalAction, default=True,
                        help="keep the fleet for later runs (default) or delete it afterwards")
    parser.add_argument("--causes", action=__import__("argparse").BooleanOptionalAction, default=True,
                        help="also scan before each class's cause, as confirmed verdicts would give it (default)")


def _config(options: dict, start: datetime) -> SimConfig:
    return SimConfig(hosts=int(options.get("hosts") or 48), days=float(options.get("days") or 10),
                     interval_s=int(options.get("interval") or 300), seed=int(options.get("seed") or 1),
                     failure_scale=float(options.get("failure_scale") if options.get("failure_scale") is not None else 20),
                     start=start, cluster=CLUSTER, scenario="realistic")


def manifest_path() -> Path:
    from django.conf import settings  # the bench runs under manage.py; the data dir is the project's

    return Path(settings.DATA_DIR) / "ground-truth" / f"{CLUSTER}.json"


def _count(sql: str, params: dict | None = None) -> int:
    return int(store.query_rows(sql, params or {}, tag="bench.analysis.count", timeout_s=600)[0][0])


def _drop() -> None:
    for table in TABLES:
        store.get_client().command(f"ALTER TABLE {table} DELETE WHERE cluster = {{c:String}}",
                                   parameters={"c": CLUSTER}, settings={"mutations_sync": 1})


def _existing(wanted: SimConfig) -> dict | None:
    """The stored fleet's manifest when the store holds exactly that fleet, else None."""
    path = manifest_path()
    if not path.exists():
        return None
    manifest = json.loads(path.read_text())
    cfg = manifest.get("config", {})
    same = all(cfg.get(k) == v for k, v in (("hosts", wanted.hosts), ("days", wanted.days),
                                            ("interval_s", wanted.interval_s), ("seed", wanted.seed),
                                            ("failure_scale", wanted.failure_scale)))
    if not same:
        return None
    n = _count("SELECT count() FROM samples WHERE cluster = {c:String}", {"c": CLUSTER})
    return manifest if n == manifest["counts"]["samples"] else None


def _build(cfg: SimConfig, progress) -> dict:
    _drop()
    t = time.perf_counter()
    last = [0.0]

    def report(done: int, total: int) -> None:
        if time.perf_counter() - last[0] > 30:
            last[0] = time.perf_counter()
            progress(f"bench analysis: {done:,} / ~{total:,} samples written")

    # a new salt per build: the fleet just deleted had the same content tokens, and the store
    # would drop this build's inserts as retries of those
    manifest: Manifest = simulate(cfg, progress=report, tag="bench.analysis.build", token_salt=f"build-{time.time_ns()}")
    stored = _count("SELECT count() FROM samples WHERE cluster = {c:String}", {"c": CLUSTER})
    if stored != manifest.counts["samples"]:
        raise RuntimeError(f"bench analysis: the build stored {stored:,} samples of the fleet's "
                           f"{manifest.counts['samples']:,}; the fleet is incomplete (rerun with --rebuild)")
    path = manifest_path()
    manifest.write(path)
    progress(f"bench analysis: fleet built in {time.perf_counter() - t:.0f} s, ground truth {path}")
    return manifest.to_dict()


def pin_rule(row: dict) -> tuple[str, str, float] | None:
    """(condition, operator, threshold) the product pins for a scan row (rules.pin_rule, as
    scans.pin_finding); None where the product refuses (no medians, or the good direction)."""
    m = catalog.get(row["metric"])
    try:
        return rules.pin_rule(row, m.bad, m.is_counter)
    except ValueError:
        return None


def _outcome_causes(manifest: dict, outcome: windows.Outcome) -> set[str]:
    """Causes whose interruptions the outcome catches (by the manifest's ground truth)."""
    out = set()
    for f in manifest["failures"]:
        if not f.get("interrupted_job"):
            continue
        if outcome.xids and set(f.get("xids") or ()) & set(outcome.xids):
            out.add(f["cause"])
        elif outcome.states and f.get("job_state") in outcome.states:
            out.add(f["cause"])
        elif getattr(outcome, "events", ()) and "link_down" in outcome.events and f["cause"] in ("network", "nic"):
            out.add(f["cause"])
    return out


def _outcome_true(manifest: dict, text: str) -> frozenset[str]:
    """The metrics that carry a precursor of a cause whose interruptions the outcome ``text`` catches."""
    return frozenset().union(*(TRUE_METRICS.get(c, frozenset())
                               for c in _outcome_causes(manifest, windows.parse_outcome(text))))


CAUSE_MATCH_S = 900  # a failure's manifest time against its job's end (the interruption's t0)


def _cause_scans(manifest: dict, classes: list[str], lead_s: int, progress) -> dict:
    """Each class scanned before its cause ("cause: <class>"), every interrupted failure's
    interruption labelled with its cause as a confirmed verdict would (see the module docstring)."""
    lo_s = int(datetime.fromisoformat(manifest["config"]["start"].replace("Z", "+00:00")).timestamp())
    hi_s = lo_s + int(float(manifest["config"]["days"]) * 86400) + 86400
    its, _ = windows.outcome_interruptions(CLUSTER, windows.Outcome("any interruption"), 0, lo_s, hi_s,
                                           timeout_s=windows.QUERY_TIMEOUT_S)
    by_job: dict[str, list] = {}
    for it in its:
        by_job.setdefault(it.job_id, []).append(it)
    out, seconds, findings, false_findings = {}, [], 0, 0
    for cause in classes:
        keys = set()
        for f in manifest["failures"]:
            if f["cause"] != cause or not f.get("interrupted_job"):
                continue
            t = datetime.fromisoformat(f["t0"].replace("Z", "+00:00")).timestamp()
            near = [it for it in by_job.get(str(f["job_id"]), []) if abs(it.t0 - t) <= CAUSE_MATCH_S]
            if near:
                it = min(near, key=lambda x: abs(x.t0 - t))
                keys.add((CLUSTER, it.job_id, it.t0))
        outcome = windows.Outcome(label=f"cause: {cause}", cause=cause, jobs=frozenset(keys))
        progress(f"bench analysis: scanning before cause: {cause} ({len(keys)} interruptions labelled)")
        t = time.perf_counter()
        result = signal_scan.scan(outcome, lead_s, clusters=[CLUSTER])
        seconds.append(time.perf_counter() - t)
        rows = result["rows"]
        true_metric, true_set = TRUE_PRECURSOR[cause], TRUE_METRICS.get(cause, frozenset())
        rank = next((i + 1 for i, r in enumerate(rows) if r["metric"] == true_metric), None)
        row = rows[rank - 1] if rank else None
        for r in rows:
            if r["q"] is not None and r["q"] < Q_FINDING:
                findings += 1
                false_findings += r["metric"] not in true_set
        out[cause] = {"interruptions": result["outcome_interruptions"], "labelled": len(keys), "rank": rank,
                      "rank_past_true_rows": (1 + sum(1 for r in rows[:rank - 1] if r["metric"] not in true_set))
                      if rank else None,
                      "auc": row and row["auc"], "q": row and row["q"],
                      "top5": [(r["metric"], r["q"] and round(r["q"], 4)) for r in rows[:5]]}
    n = len(classes)
    return {
        "scan_top3_recall_by_cause": round(sum(1 for c in out.values() if c["rank"] and c["rank"] <= 3) / n, 3)
        if n else None,
        "scan_top3_recall_by_cause_past_true_rows": round(sum(
            1 for c in out.values() if c["rank_past_true_rows"] and c["rank_past_true_rows"] <= 3) / n, 3) if n else None,
        "false_discovery_rate_by_cause": round(false_findings / findings, 3) if findings else None,
        "findings_by_cause": findings,
        "cause_scan_seconds": round(max(seconds), 1) if seconds else None,
        "classes": out,
    }


def run(options: dict, progress) -> dict:
    cfg_store = store.config()
    migrate.migrate(store.get_client(), migrate.Target(cluster=cfg_store.cluster, ttl_days=cfg_store.ttl_days),
                    log=progress)
    days = float(options.get("days") or 10)
    start = (datetime.now(timezone.utc) - timedelta(days=days)).replace(hour=0, minute=0, second=0, microsecond=0)
    wanted = _config(options, start)
    manifest = None if options.get("rebuild") else _existing(wanted)
    built = manifest is None
    if built:
        manifest = _build(wanted, progress)
    total = _count("SELECT count() FROM samples")
    min_samples = int(options.get("min_samples") if options.get("min_samples") is not None else MIN_SAMPLES)
    if total < min_samples:
        raise RuntimeError(f"bench analysis: only {total:,} samples in the store (want >= {min_samples:,}); "
                           "a bigger --hosts/--days, or --min-samples for a small run")
    lead_s = int(float(options.get("lead_hours") or 6.0) * 3600)

    classes = sorted({f["cause"] for f in manifest["failures"] if f["has_precursor"] and f["cause"] in OUTCOMES})
    scans: dict[str, dict] = {}
    scan_seconds: dict[str, float] = {}
    for cause in classes:
        text = OUTCOMES[cause]
        if text in scans:
            continue
        progress(f"bench analysis: scanning before {text} ({cause})")
        t = time.perf_counter()
        scans[text] = signal_scan.scan(windows.parse_outcome(text), lead_s, clusters=[CLUSTER])
        scan_seconds[text] = time.perf_counter() - t
        progress(f"bench analysis: scan before {text}: {scan_seconds[text]:.0f} s, "
                 f"{scans[text]['metrics_tested']} metrics tested")

    per_class = []
    for cause in classes:
        text = OUTCOMES[cause]
        result = scans[text]
        rows = result["rows"]
        true_metric = TRUE_PRECURSOR[cause]
        rank = next((i + 1 for i, r in enumerate(rows) if r["metric"] == true_metric), None)
        row = rows[rank - 1] if rank else None
        # its rank once rows above it that carry a precursor of a cause in this outcome (its mirrors,
        # its chain's later steps, another class's precursor sharing the outcome) are passed over
        outcome_true = _outcome_true(manifest, text)
        rank_past_true = (1 + sum(1 for r in rows[:rank - 1] if r["metric"] not in outcome_true)) if rank else None
        # a row the scan could not test has no rank (the untested come last, alphabetically)
        conf_ranks = [i + 1 for i, r in enumerate(rows) if r["metric"] in WORKLOAD_METRICS and r["q"] is not None]
        fails = [f for f in manifest["failures"] if f["cause"] == cause]
        entry = {
            "class": cause, "outcome": text, "failures": len(fails),
            "with_precursor": sum(1 for f in fails if f["has_precursor"]),
            "interrupted_with_precursor": sum(1 for f in fails if f["has_precursor"] and f.get("interrupted_job")),
            "interrupted_jobs": sum(1 for f in fails if f.get("interrupted_job")),
            "outcome_interruptions": result["outcome_interruptions"], "true_precursor": true_metric,
            # of them, those whose failing part an event names (the outcome's own, or for a state
            # the interruption's hardware event: contrasts.failing_units) — read on that part
            "components_named": result.get("components_named", 0),
            # windows before the outcome left out, and hosts left out of them: an earlier interruption
            # inside left its mark on the host read (windows.failed_t0s)
            "lead_windows_left_out": (result.get("controls_excluded") or {}).get("before_interrupted", 0),
            "lead_hosts_left_out": (result.get("controls_excluded") or {}).get("before_hosts_interrupted", 0),
            # hosts left out of windows where the outcome names no part: idle for half or more of the
            # past their scores are measured against (phase.idle_past_hosts), before the outcome / controls
            "idle_past_hosts_left_out": [(result.get("controls_excluded") or {}).get("before_hosts_idle_past", 0),
                                         (result.get("controls_excluded") or {}).get("control_hosts_idle_past", 0)],
            "rank": rank, "rank_past_true_rows": rank_past_true, "auc": row and row["auc"], "q": row and row["q"],
            "median_before": row and row["median_before"], "median_control": row and row["median_control"],
            "top5": [(r["metric"], r["q"] and round(r["q"], 4)) for r in rows[:5]],
            "true_flags": row["flags"] if row else None,
            "first_confounder_rank": min(conf_ranks) if conf_ranks else None,
            "hypothesis": None, "pin_basis": None, "lift": None, "p": None, "recall": None, "precision": None,
            "control_rate": None, "best_p": None,
            "alarms": 0, "true_alarms": 0, "idle_alarms": 0, "false_alarms_per_1000_node_days": None,
            "node_days": 0.0,
        }
        rule = pin_rule(row) if row else None
        if rule:
            condition, op, thr = rule
            signal = fleet_test.Signal(true_metric, condition, op, thr, lead_s)
            progress(f"bench analysis: fleet test of {signal.text} against {text}")
            res = fleet_test.run(signal, windows.parse_outcome(text), clusters=[CLUSTER]).as_dict()
            m = catalog.get(true_metric)
            try:
                entry["pin_basis"] = rules.pin_basis(row, m.bad)
            except ValueError:
                pass
            power = res.get("power") or {}
            entry.update(control_rate=res["control_rate"], best_p=power.get("best_p"),
                         underpowered_test=bool(power.get("underpowered")))
            entry.update(hypothesis=signal.text, lift=res["lift"], p=res["p"], recall=res["recall"],
                         precision=res["precision"], alarms=res["alarms"], true_alarms=res["true_alarms"],
                         idle_alarms=res["idle_alarms"],
                         false_alarms_per_1000_node_days=res["false_alarms_per_1000_node_days"],
                         node_days=res["node_days"], table=res["table"])
        per_class.append(entry)

    by_cause = _cause_scans(manifest, classes, lead_s, progress) if options.get("causes", True) else None
    if by_cause is not None:
        for entry in per_class:
            entry["by_cause"] = by_cause["classes"].get(entry["class"])

    findings = false_findings = 0
    false_list = []
    for text, result in scans.items():
        true_set = _outcome_true(manifest, text)
        for r in result["rows"]:
            if r["q"] is not None and r["q"] < Q_FINDING:
                findings += 1
                false_findings += r["metric"] not in true_set
                if r["metric"] not in true_set:
                    false_list.append({"outcome": text, "metric": r["metric"], "q": r["q"], "auc": r["auc"],
                                       "workload": r["metric"] in WORKLOAD_METRICS, "flags": r["flags"]})
    for c in per_class:
        c["underpowered"] = c["interrupted_with_precursor"] < MIN_POWERED
    powered = [c for c in per_class if not c["underpowered"]]
    tested = [c for c in per_class if c["lift"] is not None]
    alarms = sum(c["alarms"] for c in per_class)
    true_alarms = sum(c["true_alarms"] for c in per_class)
    node_days = sum(c["node_days"] for c in per_class)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out = {
        "classes_with_precursor": len(classes),
        "scan_top3_recall": round(sum(1 for c in per_class if c["rank"] and c["rank"] <= 3) / len(classes), 3)
        if classes else None,
        # beside, never instead of, scan_top3_recall: rows above the true precursor that carry
        # another true precursor of the same outcome passed over (rank_past_true_rows)
        "scan_top3_recall_past_true_rows": round(sum(1 for c in per_class if c["rank_past_true_rows"]
                                                     and c["rank_past_true_rows"] <= 3) / len(classes), 3)
        if classes else None,
        "classes_underpowered": [c["class"] for c in per_class if c["underpowered"]],
        "scan_top3_recall_powered": round(sum(1 for c in powered if c["rank"] and c["rank"] <= 3) / len(powered), 3)
        if powered else None,
        "true_hypotheses_min_lift": round(min(c["lift"] for c in tested), 3) if tested else None,
        "true_hypotheses_max_p": max(c["p"] for c in tested if c["p"] is not None) if tested else None,
        "false_discovery_rate": round(false_findings / findings, 3) if findings else None,
        "confounders_above_true": sum(1 for c in per_class if c["first_confounder_rank"] is not None
                                      and (c["rank"] is None or c["first_confounder_rank"] < c["rank"])),
        # a rule that fired before no failure has a lift only by the ½ added to its empty cell: no evidence
        "true_hypotheses_zero_recall": [c["class"] for c in tested if not (c.get("table") or {}).get("a")],
        "true_hypotheses_underpowered_tests": [c["class"] for c in tested if c.get("underpowered_test")],
        "true_hypotheses_max_p_powered": max((c["p"] for c in tested if c["p"] is not None
                                              and not c.get("underpowered_test")), default=None),
        "alarm_precision": round(true_alarms / alarms, 4) if alarms else None,
        "false_alarms_per_1000_node_days": round((alarms - true_alarms) / node_days * 1000, 2) if node_days else None,
        "idle_alarms": sum(c["idle_alarms"] for c in per_class),
        "scan_seconds": round(max(scan_seconds.values()), 1) if scan_seconds else None,
        "metrics_scanned": max((r["metrics_tested"] for r in scans.values()), default=0),
        "samples_in_store": total,
        "peak_rss_mb": round(peak, 1),
        "samples_in_fleet": manifest["counts"]["samples"],
        "findings_q_below_0_05": findings,
        "false_findings": false_list,
        "true_hypotheses_tested": len(tested),
        "lead_window_s": lead_s,
        "built_this_run": built,
        "fleet": {k: manifest["config"][k] for k in ("hosts", "days", "interval_s", "failure_scale", "seed")},
        "classes": per_class,
    }
    if by_cause is not None:
        out.update({k: v for k, v in by_cause.items() if k != "classes"})
    if not options.get("keep", True):
        _drop()
        manifest_path().unlink(missing_ok=True)
    return out
