"""Labelled datasets from the team's verdicts, for training failure-prediction models.

An export is a background job that writes one Parquet (or CSV) file under the data directory's
``exports/`` folder, format ``precursor-dataset/1``:

- one row per **window**: the lead window before each case that has a current verdict (label
  ``interrupted = 1``) and, unless turned off, its matched healthy control windows (same hosts 1–3
  days before and after, healthy peers at the same time, matched on activity: ``interrupted = 0``)
  — the windows of the fleet test (telemetry.queries.windows);
- the labels the team gave: the case's current verdict (confirmed / false_positive /
  inconclusive), its root cause, the hypothesis it names and that hypothesis's metric; empty on
  control rows;
- one feature column per catalog metric present, ``f:<metric>``: the worst hourly value over the
  window's hosts in the metric's bad direction (minute means for gauges, per-second rates for
  counters; telemetry.queries.signal_scan), NaN where the hosts reported nothing;
- the manifest (format, parameters, counts, column meanings) in the Parquet file's metadata
  under ``precursor`` and in the job's result.

Rows of one case share its ``group`` (cluster/job id): split train and test by group, or the
controls of a case leak its failure's context into both sides.
"""
from __future__ import annotations

import csv
import hashlib
import json
import os
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from django.conf import settings
from django.db import transaction

from investigations.models import BackgroundJob, Case, Verdict
from investigations.services import jobs
from investigations.roles import require_investigator
from investigations.services.jobs import JobContext, job_kind
from telemetry import rules
from telemetry.queries import signal_scan, windows

EXPORT_KIND = "dataset_export"
FORMAT = "precursor-dataset/1"
FORMATS = ("parquet", "csv")
VERDICT_KINDS = tuple(Verdict.Kind.values)
DEFAULT_LEAD_S = 6 * 3600
HOUR = 3600

COLUMNS = {
    "example_id": "cluster/job id/window kind/index — unique per row",
    "group": "cluster/job id of the case the row belongs to: split train/test by it",
    "window": "before (the lead window before the case's t0) | same_hosts | peers (controls)",
    "interrupted": "1 for the window before an interruption, 0 for a healthy control",
    "case_id": "the case in Precursor", "cluster": "cluster", "job_id": "the interrupted job",
    "state": "the job's final Slurm state", "t0": "the case's t0 (UTC)",
    "window_start": "window start (UTC)", "window_end": "window end (UTC), exclusive",
    "n_hosts": "hosts in the window", "hosts": "the window's hosts, comma-separated",
    "verdict": "the case's current verdict (before rows only)", "root_cause": "the verdict's root cause",
    "hypothesis_id": "the hypothesis the verdict names", "hypothesis_metric": "that hypothesis's metric",
    "f:<metric>": "worst hourly value over the window's hosts in the metric's bad direction; NaN: no data",
}


def exports_dir() -> Path:
    path = Path(settings.DATA_DIR) / "exports"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _current(kinds, cluster: str | None) -> list[tuple[Case, Verdict]]:
    cases = Case.objects.all()
    if cluster:
        cases = cases.filter(cluster=cluster)
    by_case = Verdict.objects.filter(case__in=cases).select_related("case", "hypothesis").current()
    return [(v.case, v) for v in by_case.values() if v.kind in kinds]


def _params(lead_window_s, kinds, controls, fmt, cluster) -> dict:
    lead_window_s = rules.check_lead_window(lead_window_s)
    kinds = list(kinds or VERDICT_KINDS)
    bad = [k for k in kinds if k not in VERDICT_KINDS]
    if bad:
        raise ValueError(f"kinds: {', '.join(map(repr, bad))} not among {', '.join(VERDICT_KINDS)}")
    if fmt not in FORMATS:
        raise ValueError(f"format: {fmt!r} is not one of {', '.join(FORMATS)}")
    cluster = (cluster or "").strip() or None
    return {"lead_window_s": lead_window_s, "kinds": sorted(set(kinds)), "controls": bool(controls),
            "format": fmt, "cluster": cluster}


def start_export(user, *, lead_window_s: int = DEFAULT_LEAD_S, kinds=None, controls: bool = True,
                 fmt: str = "parquet", cluster: str | None = None) -> BackgroundJob:
    require_investigator(user, "exporting a dataset")
    params = _params(lead_window_s, kinds, controls, fmt, cluster)
    n = len(_current(params["kinds"], params["cluster"]))
    if not n:
        raise ValueError("no case has a current verdict of the chosen kinds" +
                         (f" in cluster {params['cluster']}" if params["cluster"] else "") +
                         ": record verdicts first — they are the labels")
    with transaction.atomic():
        return jobs.start_job(EXPORT_KIND, params, user=user)


def _iso(ts: int) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat()


@job_kind(EXPORT_KIND)
def run_export(ctx: JobContext) -> dict:
    p = _params(ctx.params.get("lead_window_s"), ctx.params.get("kinds"), ctx.params.get("controls", True),
                ctx.params.get("format", "parquet"), ctx.params.get("cluster"))
    W = p["lead_window_s"]
    labelled = _current(p["kinds"], p["cluster"])
    if not labelled:
        raise ValueError("no case has a current verdict of the chosen kinds any more")
    timeout = max(1, int(ctx.remaining_s()))
    by_cluster: dict[str, list[tuple[Case, Verdict]]] = {}
    for case, v in labelled:
        by_cluster.setdefault(case.cluster, []).append((case, v))
    rows: list[dict] = []
    features: dict[str, list[float]] = {}
    without_telemetry = 0  # cases in clusters with no telemetry in the store: nothing to describe them
    for ci, (cluster, pairs) in enumerate(sorted(by_cluster.items())):
        ctx.progress(ci * 1000, len(by_cluster) * 1000,
                     f"cluster {cluster} ({ci + 1}/{len(by_cluster)}): windows of {len(pairs)} cases")
        present = windows.metrics_present(cluster, timeout_s=timeout)
        if not present:
            without_telemetry += len(pairs)
            continue
        span_lo, span_hi = min(a for _, a, _ in present), max(b for _, _, b in present) + 60
        pairs.sort(key=lambda cv: (cv[0].t0, cv[0].job_id))
        chosen = [windows.Interruption(cluster, c.job_id, c.job_name, c.state, int(c.t0.timestamp()),
                                       tuple(sorted(c.hosts))) for c, _ in pairs]
        lo = min(i.t0 for i in chosen) - W - windows.CONTROL_REACH_S
        hi = max(i.t0 for i in chosen) + W + windows.CONTROL_REACH_S
        _, host_t0s = windows.outcome_interruptions(cluster, windows.Outcome("any interruption"), W, lo, hi,
                                                    timeout_s=timeout)
        if p["controls"]:
            allocations = windows.Allocations.load(cluster, lo, hi, timeout_s=timeout)
            hosts = windows.hosts_of(cluster, timeout_s=timeout)
            # every labelled case keeps its window whole (no ``failed``: the scans' rule would drop a
            # case whose window holds an earlier interruption's mark in the logs of the host read)
            found = windows.matched_windows(cluster, chosen, host_t0s, W, span_lo, span_hi, hosts, allocations)
        else:
            found = [windows.Window("before", i, it.hosts, it.t0 - W, it.t0) for i, it in enumerate(chosen)]
        names = [m for m, _, _ in present]

        def say(done, total, stage, _ci=ci):
            ctx.progress(_ci * 1000 + int(1000 * done / max(total, 1)), len(by_cluster) * 1000, f"cluster {cluster}: {stage}")

        values = signal_scan.window_features(cluster, found, names, lo_s=min(w.start for w in found) - HOUR,
                                             hi_s=max(w.end for w in found), progress=say, timeout_s=timeout)
        seen = {}
        start_row = len(rows)
        for w in found:
            case, verdict = pairs[w.index]
            it = chosen[w.index]
            k = seen[(w.index, w.kind)] = seen.get((w.index, w.kind), -1) + 1
            before = w.kind == "before"
            h = verdict.hypothesis if before else None
            rows.append({
                "example_id": f"{cluster}/{it.job_id}/{w.kind}/{k}", "group": f"{cluster}/{it.job_id}",
                "window": w.kind, "interrupted": 1 if before else 0, "case_id": case.pk, "cluster": cluster,
                "job_id": it.job_id, "state": it.state, "t0": _iso(it.t0), "window_start": _iso(w.start),
                "window_end": _iso(w.end), "n_hosts": len(w.hosts), "hosts": ",".join(w.hosts),
                "verdict": verdict.kind if before else None, "root_cause": (verdict.root_cause or None) if before else None,
                "hypothesis_id": h.pk if h else None, "hypothesis_metric": h.metric if h else None,
            })
        for name in set(features) | set(names):
            col = features.setdefault(name, [float("nan")] * start_row)
            col.extend(values[name].tolist() if name in values else [float("nan")] * (len(rows) - start_row))
    ctx.progress(len(by_cluster) * 1000, len(by_cluster) * 1000, "writing the file")
    feature_names = sorted(features)
    manifest = {
        "format": FORMAT, "created": datetime.now(timezone.utc).isoformat(), "job_id": ctx.job.pk,
        "params": p, "rows": len(rows), "positives": sum(r["interrupted"] for r in rows),
        "controls": sum(1 - r["interrupted"] for r in rows), "cases": len(labelled) - without_telemetry,
        "cases_without_telemetry": without_telemetry,
        "features": [f"f:{m}" for m in feature_names], "columns": COLUMNS,
        "labels": {k: sum(1 for r in rows if r["verdict"] == k) for k in VERDICT_KINDS},
    }
    path = _write(ctx.job.pk, p["format"], rows, {f"f:{m}": features[m] for m in feature_names}, manifest)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return {**manifest, "file": path.name, "bytes": path.stat().st_size, "sha256": digest}


_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value):
    """A CSV cell a spreadsheet shows as text: a string starting with = + - @ tab or CR
    (a formula to Excel, LibreOffice and Sheets: ``=HYPERLINK(...)`` in a root cause
    or a job name) gets a leading apostrophe. Numbers are written as numbers."""
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value


def _write(job_id: int, fmt: str, rows: list[dict], feats: dict[str, list[float]], manifest: dict) -> Path:
    out = exports_dir() / f"precursor-dataset-{job_id}.{fmt}"
    tmp = out.with_suffix(out.suffix + ".partial")
    base = list(COLUMNS)[:-1]
    if fmt == "parquet":
        types = {"interrupted": pa.int8(), "case_id": pa.int64(), "n_hosts": pa.int32(), "hypothesis_id": pa.int64()}
        cols = {c: pa.array([r[c] for r in rows], type=types.get(c, pa.string())) for c in base}
        cols.update({name: pa.array(np.asarray(v, dtype=float), type=pa.float64()) for name, v in feats.items()})
        table = pa.table(cols).replace_schema_metadata({"precursor": json.dumps(manifest)})
        pq.write_table(table, tmp, compression="zstd")
    else:
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(base + list(feats))
            for i, r in enumerate(rows):
                w.writerow([("" if r[c] is None else spreadsheet_safe(r[c])) for c in base]
                           + [("" if np.isnan(v[i]) else repr(float(v[i]))) for v in feats.values()])
        with open(out.with_suffix(".manifest.json"), "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=2)
    os.replace(tmp, out)  # a half-written file never carries the final name
    return out


def export_file(job: BackgroundJob) -> Path | None:
    """The finished export's file, or None (not an export, not finished, or the file is gone)."""
    if job.kind != EXPORT_KIND or job.state != BackgroundJob.State.SUCCEEDED or not isinstance(job.result, dict):
        return None
    name = Path(str(job.result.get("file", ""))).name  # never a path from the result
    path = exports_dir() / name
    return path if name and path.is_file() else None


def file_response(path: Path):
    """The export file as a download (the page and the API serve it alike)."""
    from django.http import FileResponse

    ctype = "application/vnd.apache.parquet" if path.suffix == ".parquet" else "text/csv"
    return FileResponse(open(path, "rb"), as_attachment=True, filename=path.name, content_type=ctype)
