"""Pages of the investigation workspace: inbox, case, board, hypothesis, audit, jobs.

Thin: every change goes through a service verb (investigations/services), every telemetry
read through a query runner (telemetry/queries), every chart through investigations/charts.
Heavy parts of the case page (topology, overlay, "what's different") load as fragments
so the header shows at once.

Permalinks: a case URL carries its view in the query string —
``?w=<start>,<end>`` (seconds relative to t0) and ``s=<metric>@<host>[/<component>],...``.
Anything in ``s`` that is not a catalog metric or a host of the job (or its healthy peers)
is answered with HTTP 400 naming the signal and the reason.
"""
from __future__ import annotations

import functools
import gzip
import hashlib
import html
import json
import mimetypes
import os
import urllib.parse
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pandas as pd

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_not_required
from django.contrib.staticfiles import finders
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Q
from django.http import Http404, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_POST

from investigations import forms
from investigations.models import AuditEvent, BackgroundJob, Case, CaseHypothesis, Hypothesis, Verdict
from investigations.roles import can_investigate, is_admin
from investigations.services import (activity, board, cases, comments, exports, fleet_tests, hypotheses, jobs,
                                     records, scans, verdicts)
from telemetry import catalog, store
from telemetry.queries import interruptions, overview
from telemetry.queries.overlay import MAX_SIGNALS, InvalidSignal, OverlayQuery, SignalSpec

DEFAULT_WINDOW = (-6 * 3600, 15 * 60)
WINDOW_PRESETS = (
    ("−1h … +5m", (-3600, 300)),
    ("−6h … +15m", (-21600, 900)),
    ("−24h … +1h", (-86400, 3600)),
    ("−3d … +1h", (-3 * 86400, 3600)),
    ("−7d … +1h", (-7 * 86400, 3600)),
)
MAX_WINDOW_S = 31 * 86400
Z_DISPLAY_CAP = 100.0
DEFAULT_SIGNALS = 4  # a case opened without s= charts this many of the top "what's different" rows
PAGE_SIZE = 50
FILTER_SCAN = 500  # rows read when filtering on case facts the telemetry store does not know
LAYER_ROWS = (  # overlay rows, top to bottom
    ("gpu", "GPU"), ("nvswitch", "NVSwitch / NVLink"), ("network", "Network"),
    ("host", "Host / power / cooling"), ("storage", "Storage"),
)
SCOPE_OF_COMPONENT = {"gpu": "gpu", "nic": "nic", "nvswitch": "nvswitch", "psu": "psu", "fan": "fan",
                      "disk": "disk", "job": "job", "cpu": "host", "": "host"}


# --- small helpers --------------------------------------------------------------------------

def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or exc.__class__.__name__
    return text.splitlines()[0]


def store_error_message(exc: BaseException) -> str:
    """What a person can act on when the telemetry store did not answer."""
    if isinstance(exc, store.StoreLocked):
        return f"{_first_line(exc)}"
    return (f"The telemetry store did not answer ({exc.__class__.__name__}: {_first_line(exc)}). "
            "Reload to retry; if it persists, check the server log.")


_JSON_HTML_ESCAPES = {ord("<"): "\\u003C", ord(">"): "\\u003E", ord("&"): "\\u0026"}


def json_for_html(text: str) -> str:
    """JSON text safe inside a <script type="application/json"> element (user text cannot close it)."""
    return text.translate(_JSON_HTML_ESCAPES)


def fmt_offset(seconds: float) -> str:
    """t−2h13m / t+5m / t0: relative times on case pages."""
    s = int(round(seconds))
    if s == 0:
        return "t0"
    sign = "−" if s < 0 else "+"
    s = abs(s)
    d, rem = divmod(s, 86400)
    h, rem = divmod(rem, 3600)
    m, sec = divmod(rem, 60)
    parts = []
    if d:
        parts.append(f"{d}d")
    if h:
        parts.append(f"{h}h")
    if m:
        parts.append(f"{m}m")
    if sec and not d and not h:
        parts.append(f"{sec}s")
    return f"t{sign}{''.join(parts)}"


def fmt_window(w: tuple[int, int]) -> str:
    return f"{fmt_offset(w[0]).replace('t', '', 1) or '0'} … {fmt_offset(w[1]).replace('t', '', 1) or '0'}"


def fmt_z(z: float) -> str:
    """+3.3σ / +38σ / ≥+100σ: beyond 100σ the exact figure says nothing more (MAD floors make it huge)."""
    if z >= Z_DISPLAY_CAP:
        return f"≥+{Z_DISPLAY_CAP:.0f}σ"
    if z <= -Z_DISPLAY_CAP:
        return f"≤−{Z_DISPLAY_CAP:.0f}σ"
    text = f"{abs(z):.0f}" if abs(z) >= 10 else f"{abs(z):.1f}"
    return ("+" if z >= 0 else "−") + text + "σ"


def fmt_num(v: float) -> str:
    """About three significant digits, never scientific notation for everyday magnitudes, never 0.000
    for a small non-zero rate (one error in six hours is 4.6e−5/s, and that is the signal)."""
    if v != v:  # NaN
        return "—"
    if v == 0:
        return "0"
    a = abs(v)
    sign = "−" if v < 0 else ""
    if a >= 1e6:
        mant, exp = f"{a:.2e}".split("e")
        return f"{sign}{mant}e{int(exp)}"
    if a >= 100:
        return f"{sign}{a:,.0f}"
    if a >= 10:
        return f"{sign}{a:.1f}"
    if a >= 0.01:
        return f"{sign}{a:.3g}"
    mant, exp = f"{a:.1e}".split("e")
    return f"{sign}{mant}e−{abs(int(exp))}"


def _utc(ts: datetime) -> datetime:
    return ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts.astimezone(timezone.utc)


def require_investigator(request, what: str) -> None:
    if not can_investigate(request.user):
        raise PermissionDenied(f"{what} needs the investigator role")


# --- permalink parameters -------------------------------------------------------------------

def parse_window(raw: str | None) -> tuple[int, int]:
    """``-21600,900`` -> (-21600, 900); InvalidSignal for anything else."""
    if not raw:
        return DEFAULT_WINDOW
    parts = raw.split(",")
    try:
        if len(parts) != 2:
            raise ValueError
        start, end = (int(float(p)) for p in parts)
    except (ValueError, OverflowError):
        raise InvalidSignal(f"w={raw!r}: expected two offsets in seconds from t0, e.g. w=-21600,900") from None
    if start >= end:
        raise InvalidSignal(f"w={raw!r}: the start ({start}) must be before the end ({end})")
    if end - start > MAX_WINDOW_S:
        raise InvalidSignal(f"w={raw!r}: the window is longer than {MAX_WINDOW_S // 86400} days")
    if end - start < 10:
        raise InvalidSignal(f"w={raw!r}: the window must be at least 10 s long")
    return start, end


def parse_signals(raw: str | None) -> list[SignalSpec]:
    """``metric@host/component,metric@host`` -> SignalSpecs. Metric names must be in the catalog
    (aliases become canonical names), so the URL names one thing however it was typed."""
    if not raw:
        return []
    out: list[SignalSpec] = []
    for i, item in enumerate(x for x in raw.split(",") if x.strip()):
        item = item.strip()
        metric, at, rest = item.partition("@")
        if not at or not metric or not rest:
            raise InvalidSignal(f"signal {i + 1} {item!r}: expected metric@host or metric@host/component")
        host, _, component = rest.partition("/")
        found = catalog.resolve(metric)
        if found is None:
            raise InvalidSignal(f"signal {i + 1} {item!r}: metric {metric!r} is not in the metric catalog")
        spec = SignalSpec(found.name, host, component)
        if spec not in out:
            out.append(spec)
    if len(out) > MAX_SIGNALS:
        raise InvalidSignal(f"s: {len(out)} signals, at most {MAX_SIGNALS}")
    return out


def signal_param(spec: SignalSpec) -> str:
    return f"{spec.metric}@{spec.host}/{spec.component}" if spec.component else f"{spec.metric}@{spec.host}"


def check_hosts(case: Case, signals: list[SignalSpec], peers: list[str] = ()) -> None:
    allowed = set(case.hosts) | set(peers)
    for i, s in enumerate(signals):
        if s.host not in allowed:
            raise InvalidSignal(f"signal {i + 1} {signal_param(s)!r}: host {s.host!r} is not one of the job's "
                                f"{len(case.hosts)} hosts or its healthy peers")


def case_view_url(case: Case, w: tuple[int, int], signals: list[SignalSpec]) -> str:
    params = {}
    if w != DEFAULT_WINDOW:
        params["w"] = f"{w[0]},{w[1]}"
    if signals:
        params["s"] = ",".join(signal_param(s) for s in signals)
    url = case.get_absolute_url()
    return url + ("?" + urllib.parse.urlencode(params, safe=",@/") if params else "")


# --- assets: served by Precursor itself (air-gapped clusters: no CDN) ------------------------

@functools.lru_cache(maxsize=1)
def _plotly_asset() -> tuple[bytes, bytes, str]:
    import plotly

    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    raw = path.read_bytes()
    return raw, gzip.compress(raw, compresslevel=6), hashlib.sha256(raw).hexdigest()[:16]


def plotly_version() -> str:
    import plotly

    return plotly.__version__


def _asset_response(request, body: bytes, gz: bytes | None, content_type: str, etag: str, max_age: int):
    tag = f'"{etag}"'
    if request.headers.get("If-None-Match") == tag:
        resp = HttpResponse(status=304)
    elif gz is not None and "gzip" in request.headers.get("Accept-Encoding", ""):
        resp = HttpResponse(gz, content_type=content_type)
        resp["Content-Encoding"] = "gzip"
    else:
        resp = HttpResponse(body, content_type=content_type)
    resp["ETag"] = tag
    resp["Vary"] = "Accept-Encoding"
    resp["Cache-Control"] = f"public, max-age={max_age}" + (", immutable" if max_age >= 86400 * 30 else "")
    return resp


@login_not_required
@require_GET
def plotly_js(request, version: str):
    """plotly.js from the installed plotly package; the URL carries the version, so it is cached for a year."""
    if version != plotly_version():
        raise Http404("that plotly version is not installed")
    raw, gz, digest = _plotly_asset()
    return _asset_response(request, raw, gz, "text/javascript; charset=utf-8", digest, 365 * 86400)


@login_not_required
@require_GET
def static_asset(request, path: str):
    """/static/… for the embedded server (``serve``), which has no proxy in front of it. Behind a
    proxy, point it at STATIC_ROOT instead (collectstatic runs at start-up)."""
    if ".." in Path(path).parts:
        raise Http404()
    found = finders.find(path)
    if not found or not os.path.isfile(found):
        raise Http404(f"no static file {path}")
    body = Path(found).read_bytes()
    ctype = mimetypes.guess_type(found)[0] or "application/octet-stream"
    if ctype.startswith("text/") or ctype.endswith("javascript"):
        ctype += "; charset=utf-8"
    # Our own files change with releases: revalidate hourly (ETag makes that cheap).
    return _asset_response(request, body, None, ctype, hashlib.sha256(body).hexdigest()[:16], 3600)


# --- inbox ----------------------------------------------------------------------------------

@dataclass
class InboxRow:
    item: interruptions.Interruption
    case: Case | None
    verdict: Verdict | None


def _cases_for(rows) -> dict[tuple[str, str], Case]:
    if not rows:
        return {}
    found = Case.objects.filter(job_id__in={r.job_id for r in rows}).select_related("assignee")
    return {(c.cluster, c.job_id): c for c in found}


def _cause_label(verdict: Verdict) -> str:
    """What the inbox counts and filters a case's current verdict under: its root cause, or
    "false positive" / "inconclusive" when it names none."""
    return verdict.root_cause or ("false positive" if verdict.kind == "false_positive" else verdict.kind.replace("_", " "))


def _current_verdicts(case_ids) -> dict[int, Verdict]:
    current: dict[int, Verdict] = {}
    for v in Verdict.objects.filter(case_id__in=list(case_ids)).order_by("case_id", "-created_at", "-pk"):
        current.setdefault(v.case_id, v)
    return current


def inbox(request):
    form = forms.InboxFilterForm(request.GET or None)
    f = form.cleaned_data if form.is_valid() else {}
    if request.GET and not form.is_valid():
        return render(request, "investigations/inbox.html",
                      {"form": form, "nav": "inbox", "plotly_version": plotly_version(), "error": "Some filters are not valid: " +
                       "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items())}, status=400)
    rng = f.get("range") or "7d"
    span = forms.RANGES[rng]
    now = datetime.now(timezone.utc)
    page_no = f.get("page") or 1
    root_cause = (f.get("root_cause") or "").strip()
    has_case = f.get("has_case") or ""
    post_filter = bool(root_cause or has_case)
    q = interruptions.InterruptionQuery(
        start=now - timedelta(seconds=span) if span else None,
        cluster=(f.get("cluster") or "").strip() or None,
        states=(f["state"],) if f.get("state") else (),
        search=(f.get("q") or "").strip(),
        limit=FILTER_SCAN if post_filter else PAGE_SIZE,
        offset=0 if post_filter else (page_no - 1) * PAGE_SIZE,
    )
    ctx = {"form": form, "nav": "inbox", "range": rng, "can_edit": can_investigate(request.user),
           "embedded": store.config().embedded, "plotly_version": plotly_version()}
    try:
        page = interruptions.list_interruptions(q)
    except Exception as exc:  # the page still renders and says what is wrong
        ctx["error"] = store_error_message(exc)
        return render(request, "investigations/inbox.html", ctx)
    by_job = _cases_for(page.rows)
    current = _current_verdicts(c.pk for c in by_job.values())
    rows = []
    for item in page.rows:
        case = by_job.get((item.cluster, item.job_id))
        verdict = current.get(case.pk) if case else None
        if has_case == "yes" and case is None or has_case == "no" and case is not None:
            continue
        if root_cause and (verdict is None or _cause_label(verdict).lower() != root_cause.lower()):
            continue
        rows.append(InboxRow(item, case, verdict))
    total = page.total
    scanned_all = True
    if post_filter:
        scanned_all = page.total <= FILTER_SCAN
        total = len(rows)
        rows = rows[(page_no - 1) * PAGE_SIZE: page_no * PAGE_SIZE]
    params = {k: v for k, v in request.GET.items() if k != "page" and v}
    ctx.update({
        "rows": rows, "total": total, "scanned_all": scanned_all, "scan_limit": FILTER_SCAN,
        "page_no": page_no, "has_prev": page_no > 1, "has_next": page_no * PAGE_SIZE < total,
        "prev_url": "?" + urlencode({**params, "page": page_no - 1}),
        "next_url": "?" + urlencode({**params, "page": page_no + 1}),
        "chart_url": reverse("inbox-chart") + ("?" + urlencode(params) if params else ""),
        "root_causes": list(Verdict.objects.exclude(root_cause="").order_by("root_cause")
                            .values_list("root_cause", flat=True).distinct()[:200]) + ["false positive", "inconclusive"],
        "clusters": sorted({r.item.cluster for r in rows} | set(Case.objects.values_list("cluster", flat=True).distinct()[:50])),
    })
    if not rows and not post_filter and total == 0:
        try:
            ctx["totals"] = overview.store_totals()
        except Exception as exc:
            ctx["error"] = store_error_message(exc)
    return render(request, "investigations/inbox.html", ctx)


def inbox_chart(request):
    """Fragment: interruptions per week by state, and per root cause (from current verdicts)."""
    from investigations import charts

    form = forms.InboxFilterForm(request.GET or None)
    f = form.cleaned_data if form.is_valid() else {}
    span = forms.RANGES[f.get("range") or "7d"]
    now = datetime.now(timezone.utc)
    try:
        weekly = interruptions.counts_by_week_and_state(
            start=now - timedelta(seconds=span) if span else None,
            cluster=(f.get("cluster") or "").strip() or None,
        )
    except Exception as exc:
        return render(request, "investigations/_fragment_error.html", {"error": store_error_message(exc)})
    case_qs = Case.objects.filter(t0__gte=now - timedelta(seconds=span)) if span else Case.objects.all()
    if f.get("cluster"):
        case_qs = case_qs.filter(cluster=f["cluster"].strip())
    t0_of = dict(case_qs.values_list("pk", "t0"))
    current = _current_verdicts(t0_of)
    causes = []
    for case_id, v in current.items():
        cause = _cause_label(v)
        week = (_utc(t0_of[case_id]) - timedelta(days=t0_of[case_id].weekday())).date()
        # Plotly draws legend and hover text as (restricted) HTML: keep user text literal.
        causes.append({"week": pd.Timestamp(week), "cause": html.escape(cause[:40]), "n": 1})
    figures = [("per week, by final state", charts.interruptions_bar(weekly, color_by="state"))]
    if causes:
        figures.append(("cases per week, by root cause (current verdicts)",
                        charts.interruptions_bar(pd.DataFrame(causes), color_by="cause")))
    for _, fig in figures:
        # One tick and one bar-width per week: with few weeks plotly otherwise spreads a bar
        # over the whole axis and repeats day ticks.
        fig.update_xaxes(dtick=7 * 86400000, tickformat="%b %d")
        fig.update_traces(width=5 * 86400000)
    return render(request, "investigations/_inbox_chart.html", {
        "figures": [(title, json_for_html(fig.to_json())) for title, fig in figures], "empty": weekly.empty})


@require_POST
def open_interruption(request):
    """One click from the inbox: the case of this interruption, created if needed."""
    require_investigator(request, "opening a case")
    cluster, job_id = request.POST.get("cluster", ""), request.POST.get("job_id", "")
    try:
        case = cases.open_case(request.user, cluster, job_id)
    except (LookupError, ValueError) as exc:
        return HttpResponseBadRequest(f"Cannot open a case: {_first_line(exc)}", content_type="text/plain")
    return redirect(case.get_absolute_url())


# --- case page ------------------------------------------------------------------------------

def _case_or_404(pk: int) -> Case:
    return get_object_or_404(Case.objects.select_related("assignee", "opened_by"), pk=pk)


def _catalog_for_picker() -> list[dict]:
    return [{"name": m.name, "layer": m.layer, "unit": m.unit + ("/s" if m.is_counter else ""), "kind": m.kind,
             "component": m.component, "description": m.description} for m in catalog.CATALOG.values()]


def _case_context(request, case: Case, *, w=None, signals=None, pin_form=None, verdict_form=None,
                  comment_form=None, link_form=None) -> dict:
    w = w or DEFAULT_WINDOW
    signals = signals or []
    pins = list(CaseHypothesis.objects.filter(case=case).select_related("hypothesis", "hypothesis__author", "pinned_by"))
    tracks = records.track_records([p.hypothesis for p in pins])
    pinned_ids = {p.hypothesis_id for p in pins}
    history = verdicts.verdict_history(case)
    events = _timeline(case)
    can_edit = can_investigate(request.user)
    t0 = _utc(case.t0)
    return {
        "case": case, "nav": "inbox", "can_edit": can_edit,
        "window": w, "window_text": fmt_window(w), "presets": [(label, f"{a},{b}", (a, b) == w) for label, (a, b) in WINDOW_PRESETS],
        "signals": [{"param": signal_param(s), "label": s.label} for s in signals],
        "signals_param": ",".join(signal_param(s) for s in signals),
        "permalink": request.build_absolute_uri(case_view_url(case, w, signals)),
        "pins": [(p, tracks.get(p.hypothesis_id)) for p in pins],
        "verdict": history[0] if history else None,
        "verdict_history": history,
        "comments": comments.comments_on(case=case),
        "activity": events,
        "users": list(get_user_model().objects.filter(is_active=True).order_by("username").values_list("username", flat=True)[:500]) if can_edit else [],
        "pin_form": pin_form or forms.PinHypothesisForm(initial={"outcome": case.state, "lead_window_min": 360,
                                                                 "condition": "rate", "operator": ">"}),
        "verdict_form": verdict_form or forms.VerdictForm(case=case),
        "comment_form": comment_form or forms.CommentForm(),
        "link_form": link_form,
        "linkable": list(Hypothesis.objects.exclude(pk__in=pinned_ids).order_by("-updated_at")[:200]) if can_edit else [],
        "catalog": _catalog_for_picker(),
        "layers": LAYER_ROWS,
        "plotly_url": reverse("plotly-js", args=[plotly_version()]),
        "t0_iso": t0.isoformat(),
    }


def case_page(request, pk: int):
    case = _case_or_404(pk)
    try:
        w = parse_window(request.GET.get("w"))
        signals = parse_signals(request.GET.get("s"))
        check_hosts(case, signals, _peers_cached(case, signals))
    except InvalidSignal as exc:
        return HttpResponseBadRequest(f"Cannot show this view of case #{case.pk}: {exc}", content_type="text/plain")
    ctx = _case_context(request, case, w=w, signals=signals)
    # No s= at all (an explicit empty s= means "nothing"): the differences fragment names the
    # signals to chart, case.js draws them and writes them into the URL. Ranking takes seconds on
    # a real fleet, so it is not done before the header is sent.
    ctx["auto_signals"] = "s" not in request.GET
    return render(request, "investigations/case.html", ctx)


def _peers_cached(case: Case, signals: list[SignalSpec]) -> list[str]:
    """Healthy peers of the case's hosts at t0; only looked up when a signal names a host outside the job."""
    if all(s.host in case.hosts for s in signals):
        return []
    try:
        return _peers(case, signals)
    except Exception:  # the store is down: only the job's own hosts can be checked
        return []


def _peers(case: Case, signals: list[SignalSpec]) -> list[str]:
    from telemetry.queries import topology

    metrics = sorted({s.metric for s in signals}) or None
    return topology.peers_of(case.cluster, list(case.hosts), case.t0, metrics=metrics)


def case_overlay(request, pk: int):
    """JSON: the overlay figure for ?w=&s= (and n = points per series, from the chart's width)."""
    from investigations import charts
    from telemetry.queries import overlay

    case = _case_or_404(pk)
    try:
        w = parse_window(request.GET.get("w"))
        signals = parse_signals(request.GET.get("s"))
        try:
            n = int(request.GET.get("n", "600"))
        except ValueError:
            raise InvalidSignal(f"n={request.GET.get('n')!r}: expected a whole number of points") from None
        n = max(50, min(n, 2000))
        if not signals:
            return JsonResponse({"figure": None, "message": "No signals yet: add one with “+ signal”, from the "
                                 "topology, or from “What's different here”."})
        q = OverlayQuery(case.cluster, case.t0, w[0], w[1], signals, max_points=n)
        overlay.validate(q, allowed_hosts=None)  # metric and name checks before any query
    except InvalidSignal as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    try:
        peers = _peers(case, signals)
        check_hosts(case, signals, peers)
        q = OverlayQuery(case.cluster, case.t0, w[0], w[1], signals, peers=peers, max_points=n)
        result = overlay.run_overlay(q, allowed_hosts=set(case.hosts) | set(peers))
    except InvalidSignal as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    except Exception as exc:
        return JsonResponse({"error": store_error_message(exc)}, status=503)
    fig = charts.overlay_figure(result)
    meta = {
        "source": result.source, "bucket_s": result.bucket_s, "peers": len(result.peers),
        "band_source": result.band_source,
        "points": int(sum(len(s.x) for s in result.series)), "events": len(result.events),
        "window": list(w), "signals": [signal_param(s) for s in signals],
        "empty": [signal_param(s.signal) for s in result.series if len(s.x) == 0],
    }
    body = '{"figure": ' + fig.to_json() + ', "meta": ' + json.dumps(meta) + "}"
    return HttpResponse(body, content_type="application/json")


def case_topology(request, pk: int):
    """Fragment: job -> hosts -> GPUs / NVSwitches / NICs (-> switch ports), each a signal target."""
    from telemetry.queries import topology

    case = _case_or_404(pk)
    try:
        topo = topology.job_topology(case.cluster, case.job_id)
        found = interruptions.get_interruption(case.cluster, case.job_id)
    except topology.UnknownJob as exc:
        return render(request, "investigations/_fragment_error.html", {"error": _first_line(exc)})
    except Exception as exc:
        return render(request, "investigations/_fragment_error.html", {"error": store_error_message(exc)})
    marks: dict[str, list[str]] = {}
    for e in (found.events if found else []):
        marks.setdefault(e.first_host, []).append(e.label.split(" ")[0] + (f" {e.code}" if e.kind == "xid" else ""))
    hosts = []
    for i, h in enumerate(topo.hosts):
        hosts.append({"node": h, "marks": marks.get(h.host, []), "open": bool(marks.get(h.host)) or i == 0})
    hosts.sort(key=lambda x: (not x["marks"],))
    return render(request, "investigations/_topology.html", {"case": case, "topo": topo, "hosts": hosts})


def case_differences(request, pk: int):
    """Fragment: the lead-window components that differ most from healthy peers."""
    from telemetry.queries import differences

    case = _case_or_404(pk)
    try:
        w = parse_window(request.GET.get("w"))
    except InvalidSignal as exc:
        return HttpResponseBadRequest(str(exc), content_type="text/plain")
    lead_s = max(60, min(-w[0], 14 * 86400)) if w[0] < 0 else 6 * 3600
    try:
        peers = _peers(case, [])
        if not peers:
            return render(request, "investigations/_fragment_error.html",
                          {"error": "No healthy peers reported data around t0, so there is nothing to compare against."})
        found = differences.whats_different(differences.DifferenceQuery(
            cluster=case.cluster, t0=case.t0, lead_s=lead_s, affected_hosts=list(case.hosts), peers=peers, top_n=15))
    except Exception as exc:
        return render(request, "investigations/_fragment_error.html", {"error": store_error_message(exc)})
    rows = [{"d": d, "signal": signal_param(SignalSpec(d.metric, d.host, d.component)),
             "scope": SCOPE_OF_COMPONENT.get(catalog.CATALOG[d.metric].component, "host"),
             "z_text": fmt_z(d.z), "z_exact": f"z = {d.z:+.2f}" + (" (capped)" if abs(d.z) >= differences.Z_CAP else ""),
             "value": fmt_num(d.affected_value), "median": fmt_num(d.peer_median), "p95": fmt_num(d.peer_p95)}
            for d in found]
    return render(request, "investigations/_differences.html",
                  {"case": case, "rows": rows, "lead": fmt_offset(-lead_s), "n_peers": len(peers),
                   "defaults": default_signals(found), "can_edit": can_investigate(request.user)})


def default_signals(found, n: int = DEFAULT_SIGNALS) -> list[str]:
    """What a case opened without ``s=`` charts: the top rows of "what's different", one per metric
    while there are enough distinct metrics (four GPUs with the same runaway counter say less than
    four different counters), topped up with the next rows in rank order down to three."""
    picked = []
    seen = set()
    for d in found:
        if len(picked) == n:
            break
        if d.metric not in seen:
            picked.append(d)
            seen.add(d.metric)
    for d in found:
        if len(picked) >= min(3, n):
            break
        if d not in picked:
            picked.append(d)
    picked.sort(key=found.index)
    return [signal_param(SignalSpec(d.metric, d.host, d.component)) for d in picked]


def _back_to_case(request, case: Case) -> str:
    nxt = request.POST.get("next", "")
    if nxt.startswith(case.get_absolute_url()):
        return nxt
    return case.get_absolute_url()


def _case_with_errors(request, case: Case, status: int = 400, **forms_):
    return render(request, "investigations/case.html", _case_context(request, case, **forms_), status=status)


@require_POST
def case_pin(request, pk: int):
    case = _case_or_404(pk)
    require_investigator(request, "pinning a hypothesis")
    form = forms.PinHypothesisForm(request.POST)
    if not form.is_valid():
        return _case_with_errors(request, case, pin_form=form)
    d = form.cleaned_data
    try:
        h = hypotheses.pin_hypothesis(
            request.user, case=case, statement=d["statement"], metric=d["metric"],
            component_scope=d["component_scope"], condition=d["condition"], operator=d["operator"],
            threshold=d["threshold"], lead_window_s=d["lead_window_min"] * 60, outcome=d["outcome"], note=d["note"])
    except (ValueError, ValidationError) as exc:
        form.add_error(None, _first_line(exc))
        return _case_with_errors(request, case, pin_form=form)
    messages.success(request, f"Pinned {h.short_id} to case #{case.pk}.")
    return redirect(_back_to_case(request, case))


@require_POST
def case_link(request, pk: int):
    case = _case_or_404(pk)
    require_investigator(request, "pinning a hypothesis")
    form = forms.LinkHypothesisForm(request.POST)
    if not form.is_valid():
        return _case_with_errors(request, case, link_form=form)
    hypotheses.link_hypothesis(request.user, form.cleaned_data["hypothesis"], case, form.cleaned_data["note"])
    messages.success(request, f"Pinned {form.cleaned_data['hypothesis'].short_id} to case #{case.pk}.")
    return redirect(_back_to_case(request, case))


@require_POST
def case_verdict(request, pk: int):
    case = _case_or_404(pk)
    require_investigator(request, "recording a verdict")
    form = forms.VerdictForm(request.POST, case=case)
    if not form.is_valid():
        return _case_with_errors(request, case, verdict_form=form)
    d = form.cleaned_data
    try:
        v = verdicts.record_verdict(request.user, case, kind=d["kind"], rationale=d["rationale"],
                                    hypothesis=d["hypothesis"], root_cause=d["root_cause"])
    except (ValueError, ValidationError) as exc:
        form.add_error(None, _first_line(exc))
        return _case_with_errors(request, case, verdict_form=form)
    messages.success(request, f"Verdict recorded: {v.get_kind_display()}.")
    return redirect(_back_to_case(request, case))


@require_POST
def case_comment(request, pk: int):
    case = _case_or_404(pk)
    require_investigator(request, "commenting")
    form = forms.CommentForm(request.POST)
    if not form.is_valid():
        return _case_with_errors(request, case, comment_form=form)
    try:
        comments.add_comment(request.user, case=case, body=form.cleaned_data["body"])
    except ValueError as exc:
        form.add_error("body", _first_line(exc))
        return _case_with_errors(request, case, comment_form=form)
    return redirect(_back_to_case(request, case) + "#comments")


@require_POST
def case_assign(request, pk: int):
    case = _case_or_404(pk)
    require_investigator(request, "assigning a case")
    try:
        cases.assign_case(request.user, case, request.POST.get("assignee", "").strip() or None)
    except ValueError as exc:
        messages.error(request, _first_line(exc))
    return redirect(_back_to_case(request, case))


@require_POST
def case_status(request, pk: int):
    case = _case_or_404(pk)
    require_investigator(request, "changing a case's status")
    try:
        cases.set_case_status(request.user, case, request.POST.get("status", ""))
    except ValueError as exc:
        messages.error(request, _first_line(exc))
    return redirect(_back_to_case(request, case))


def case_activity(request, pk: int):
    case = _case_or_404(pk)
    return render(request, "investigations/_activity.html", {"activity": _timeline(case)})


ACTIVITY_TEXT = {
    "case.opened": "opened the case", "case.assigned": "assigned the case", "case.status_changed": "set the status",
    "comment.added": "commented", "hypothesis.created": "created", "hypothesis.pinned": "pinned",
    "hypothesis.status_changed": "changed the status of", "verdict.recorded": "recorded a verdict",
    "job.started": "started", "job.succeeded": "finished", "job.failed": "failed:",
    "job.cancelled": "cancelled", "job.cancel_requested": "asked to cancel",
}


def _described(events: list) -> list:
    for e in events:
        e.text = ACTIVITY_TEXT.get(e.verb, e.verb)
    return events


def _timeline(case: Case) -> list:
    events = activity.case_activity(case)
    t0 = _utc(case.t0)
    for e in events:
        e.rel = fmt_offset((_utc(e.created_at) - t0).total_seconds())
        e.text = ACTIVITY_TEXT.get(e.verb, e.verb)
    return events


# --- hypotheses -----------------------------------------------------------------------------

BOARD_COLUMNS = (
    ("id", "id"), ("statement", "statement"), ("metric", "signal"), ("outcome", "outcome"), ("status", "status"),
    ("confirmed", "track record"), ("latest_test", "latest fleet test"), ("precision", "precision (95% CI)"),
    ("author", "author"), ("updated_at", "last activity"),
)


def board_page(request):
    sort = request.GET.get("sort") or "-updated_at"
    status = request.GET.get("status") or None
    author = request.GET.get("author") or None
    scope = request.GET.get("scope") or None
    q = request.GET.get("q", "")[:200]
    try:
        rows = board.board_rows(q=q, status=status, author=author, component_scope=scope, sort=sort)
    except ValueError as exc:
        return HttpResponseBadRequest(f"Cannot show the board: {_first_line(exc)}", content_type="text/plain")
    base = {k: v for k, v in request.GET.items() if k != "sort" and v}
    columns = []
    for key, label in BOARD_COLUMNS:
        active = sort.lstrip("-") == key
        nxt = key if (active and sort.startswith("-")) else "-" + key
        columns.append({"label": label, "url": "?" + urlencode({**base, "sort": nxt}), "active": active,
                        "desc": sort.startswith("-")})
    return render(request, "investigations/board.html", {
        "rows": rows, "columns": columns, "q": q, "status": status or "", "author": author or "", "scope": scope or "",
        "statuses": hypotheses.STATUSES, "scopes": forms.COMPONENT_SCOPES, "nav": "board",
        "authors": list(get_user_model().objects.filter(hypotheses__isnull=False).distinct()
                        .order_by("username").values_list("username", flat=True)),
    })


def hypothesis_page(request, pk: int):
    h = get_object_or_404(Hypothesis.objects.select_related("author"), pk=pk)
    pins = list(CaseHypothesis.objects.filter(hypothesis=h).select_related("case", "pinned_by").order_by("-case__t0"))
    current = _current_verdicts(p.case_id for p in pins)
    tests = list(BackgroundJob.objects.filter(Q(params__hypothesis_id=h.pk) | Q(params__hypothesis_id=str(h.pk)),
                                              kind=records.TEST_KIND).order_by("-created_at")[:50])
    return render(request, "investigations/hypothesis.html", {
        "h": h, "nav": "board", "record": records.track_record(h),
        "pins": [(p, current.get(p.case_id)) for p in pins], "tests": tests,
        "comments": comments.comments_on(hypothesis=h), "history": _described(activity.hypothesis_activity(h)),
        "can_edit": can_investigate(request.user), "transitions": hypotheses.TRANSITIONS.get(h.status, ()),
        "comment_form": forms.CommentForm(), "untestable": _untestable(h),
        "test_clusters": _case_clusters(),
    })


def _case_clusters() -> list[str]:
    """Cluster names to suggest in the analysis forms: those cases were opened on."""
    return sorted(set(Case.objects.values_list("cluster", flat=True).distinct()[:50]))


def _history_days(request) -> int | None:
    """The forms' history choice: 7, 30, 90 days, or None for all; ValueError otherwise."""
    choice = request.POST.get("days", "")
    if choice not in fleet_tests.RANGES:
        raise ValueError(f"days: {choice!r} is not one of 7, 30, 90 or all")
    return fleet_tests.RANGES[choice]


def _untestable(h: Hypothesis) -> str:
    try:
        fleet_tests.check_testable(h)
    except ValueError as exc:
        return str(exc)
    return ""


@require_POST
def hypothesis_comment(request, pk: int):
    h = get_object_or_404(Hypothesis, pk=pk)
    require_investigator(request, "commenting")
    try:
        comments.add_comment(request.user, hypothesis=h, body=request.POST.get("body", ""))
    except ValueError as exc:
        messages.error(request, _first_line(exc))
    return redirect(h.get_absolute_url() + "#comments")


@require_POST
def hypothesis_status(request, pk: int):
    h = get_object_or_404(Hypothesis, pk=pk)
    require_investigator(request, "changing a hypothesis's status")
    try:
        hypotheses.set_status(request.user, h, request.POST.get("status", ""))
    except ValueError as exc:
        messages.error(request, _first_line(exc))
    return redirect(h.get_absolute_url())


@require_POST
def hypothesis_test(request, pk: int):
    h = get_object_or_404(Hypothesis, pk=pk)
    require_investigator(request, "starting a fleet test")
    try:
        job = fleet_tests.start_test(request.user, h, cluster=request.POST.get("cluster") or None,
                                     days=_history_days(request))
    except ValueError as exc:
        messages.error(request, _first_line(exc))
        return redirect(h.get_absolute_url())
    return redirect("job", job_id=job.pk)


# --- search, audit, jobs --------------------------------------------------------------------

def search(request):
    """The nav search box: H12 / #214 jump straight there; anything else lists matches."""
    q = request.GET.get("q", "").strip()[:200]
    if q[:1] in "Hh" and q[1:].isdigit() and Hypothesis.objects.filter(pk=int(q[1:])).exists():
        return redirect(f"/hypotheses/{int(q[1:])}/")
    if q.startswith("#") and q[1:].isdigit() and Case.objects.filter(pk=int(q[1:])).exists():
        return redirect(f"/cases/{int(q[1:])}/")
    found_cases = cases.list_cases(q=q, limit=50) if q else []
    found_h = board.board_rows(q=q)[:50] if q else []
    return render(request, "investigations/search.html",
                  {"q": q, "cases": found_cases, "hypotheses": found_h,
                   "inbox_url": "/?" + urlencode({"q": q, "range": "all"})})


def audit_page(request):
    if not is_admin(request.user):
        raise PermissionDenied("the audit log needs the admin role")
    actor = request.GET.get("actor") or None
    verb = request.GET.get("verb") or None
    q = request.GET.get("q", "")[:200]
    events = activity.audit_log(request.user, actor=actor, verb=verb, q=q, limit=500)
    return render(request, "investigations/audit.html", {
        "events": events, "actor": actor or "", "verb": verb or "", "q": q, "nav": "audit",
        "verbs": list(AuditEvent.objects.order_by("verb").values_list("verb", flat=True).distinct()),
    })


SCAN_OUTCOMES = ("any interruption", "NODE_FAIL", "FAILED", "TIMEOUT", "REQUEUED", "XID 79", "XID 48/94", "XID 74")


def jobs_page(request):
    rows = list(BackgroundJob.objects.select_related("created_by").order_by("-created_at")[:200])
    return render(request, "investigations/jobs.html", {
        "jobs": rows, "nav": "jobs", "can_edit": can_investigate(request.user), "outcomes": SCAN_OUTCOMES,
        "clusters": _case_clusters(),
    })


def exports_page(request):
    done = list(BackgroundJob.objects.filter(kind=exports.EXPORT_KIND).select_related("created_by")
                .order_by("-created_at")[:100])
    labelled = Verdict.objects.values("case_id").distinct().count()
    return render(request, "investigations/exports.html", {
        "exports": done, "nav": "exports", "can_edit": can_investigate(request.user), "labelled": labelled,
        "kinds": exports.VERDICT_KINDS, "formats": exports.FORMATS, "format_name": exports.FORMAT,
        "clusters": _case_clusters(),
    })


@require_POST
def export_start(request):
    require_investigator(request, "exporting a dataset")
    try:
        hours = float(request.POST.get("lead_h", ""))
        job = exports.start_export(request.user, lead_window_s=int(round(hours * 3600)),
                                   kinds=request.POST.getlist("kinds") or None,
                                   controls=request.POST.get("controls") == "1", fmt=request.POST.get("format", "parquet"),
                                   cluster=request.POST.get("cluster") or None)
    except ValueError as exc:
        messages.error(request, "Export not started: " + _first_line(exc))
        return redirect("exports")
    return redirect("job", job_id=job.pk)


def export_download(request, job_id: int):
    job = get_object_or_404(BackgroundJob, pk=job_id)
    path = exports.export_file(job)
    if path is None:
        raise Http404("no finished export file for this job (not an export, not finished, or deleted)")
    return exports.file_response(path)


@require_POST
def scan_start(request):
    require_investigator(request, "starting a signal scan")
    try:
        hours = float(request.POST.get("lead_h", ""))
        job = scans.start_scan(request.user, outcome=request.POST.get("outcome", ""),
                               lead_window_s=int(round(hours * 3600)), days=_history_days(request),
                               cluster=request.POST.get("cluster") or None)
    except ValueError as exc:
        messages.error(request, "Signal scan not started: " + _first_line(exc))
        return redirect("jobs")
    return redirect("job", job_id=job.pk)


@require_POST
def scan_pin(request, job_id: int):
    job = get_object_or_404(BackgroundJob, pk=job_id)
    require_investigator(request, "pinning a hypothesis")
    try:
        h = scans.pin_finding(request.user, job, request.POST.get("metric", ""))
    except ValueError as exc:
        messages.error(request, _first_line(exc))
        return redirect("job", job_id=job.pk)
    messages.success(request, f"{h.short_id} pinned from the scan: run a fleet test to see how it holds up")
    return redirect(h.get_absolute_url())


def _job_context(request, job: BackgroundJob) -> dict:
    ctx = {"job": job, "can_edit": can_investigate(request.user), "result_text": json.dumps(job.result, indent=2, sort_keys=True, default=str)[:200_000]
           if job.result is not None else ""}
    if job.kind == records.TEST_KIND and job.state == "succeeded" and isinstance(job.result, dict):
        ctx["test"] = _test_view(job.result)
    if job.kind == scans.SCAN_KIND and job.state == "succeeded" and isinstance(job.result, dict):
        ctx["scan"] = _scan_view(job.result)
    if job.kind == exports.EXPORT_KIND and job.state == "succeeded":
        ctx["export"] = {"r": job.result, "available": exports.export_file(job) is not None}
    return ctx


def _scan_view(r: dict) -> dict:
    from investigations import charts

    rows = r.get("rows") or []
    tested = [row for row in rows if row.get("auc") is not None]
    figure = charts.scan_bars(tested[:20]).to_json() if tested else None
    return {"r": r, "rows": rows, "figure": figure, "lead": fmt_offset(-int(r.get("lead_window_s") or 0)),
            "significant": sum(1 for row in tested if row["q"] < 0.05)}


def _test_view(r: dict) -> dict:
    """A fleet test's result as the job page shows it: numbers, figures, examples with links."""
    examples = r.get("examples") or []
    found = {(c.cluster, c.job_id): c for c in Case.objects.filter(
        job_id__in=[e["job_id"] for e in examples]).only("pk", "cluster", "job_id")}
    for e in examples:
        case = found.get((e["cluster"], e["job_id"]))
        e["case_url"] = case.get_absolute_url() if case else None
        e["lead"] = fmt_offset(-e["lead_s"]) if e.get("lead_s") is not None else ""
    h = Hypothesis.objects.filter(pk=r.get("hypothesis_id")).first()
    from investigations import charts

    figures = [("firing before the outcome vs in control windows", charts.firing_rates(r).to_json())]
    if r.get("lead_times_s"):
        figures.append(("lead time: first firing before t0", charts.lead_time_histogram(r["lead_times_s"]).to_json()))
    return {"r": r, "h": h, "examples": examples, "figures": figures,
            "lead_median": fmt_offset(-r["lead_median_s"]) if r.get("lead_median_s") is not None else None}


def job_page(request, job_id: int):
    job = get_object_or_404(BackgroundJob.objects.select_related("created_by"), pk=job_id)
    return render(request, "investigations/job.html", {
        **_job_context(request, job), "nav": "jobs", "plotly_version": plotly_version(),
        "params_text": json.dumps(job.params, sort_keys=True, default=str)[:500],
    })


def job_progress(request, job_id: int):
    job = get_object_or_404(BackgroundJob, pk=job_id)
    return render(request, "investigations/_job_progress.html", _job_context(request, job))


@require_POST
def job_cancel(request, job_id: int):
    job = get_object_or_404(BackgroundJob, pk=job_id)
    if not can_investigate(request.user):
        raise PermissionDenied("cancelling jobs needs the investigator or admin role")
    job = jobs.cancel_job(job, user=request.user)
    messages.info(request, f"job {job.pk}: " + ("cancelled" if job.state == "cancelled" else
                                                 "cancel requested; it stops at its next step" if job.is_active else
                                                 f"already {job.state}"))
    return redirect("job", job_id=job.pk)
