"""The inbox: interruptions from the telemetry store joined with the cases and current verdicts
the team recorded, filtered on both. Pages and API call the same functions.

Filters the telemetry store knows (time, cluster, state, text) run there; filters on case facts
(has a case, root cause) become the (cluster, job_id) lists of the matching cases, which the
store filters on too, so totals and pages are exact over every match.
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import pandas as pd

from investigations.models import Case, Verdict
from telemetry.queries import interruptions

PAGE_SIZE = 50
FILTER_SCAN = 500  # rows read when filtering on case facts the telemetry store does not know
HAS_CASE = ("", "yes", "no")


@dataclass
class InboxRow:
    item: interruptions.Interruption
    case: Case | None
    verdict: Verdict | None


@dataclass
class InboxFilter:
    span_s: int | None = 7 * 86400  # None: all time
    # Absolute bounds (UTC, t0 >= start, t0 < end); either one set replaces span_s.
    start: datetime | None = None
    end: datetime | None = None
    cluster: str | None = None
    state: str | None = None
    search: str = ""
    root_cause: str = ""
    has_case: str = ""  # "", "yes", "no"
    page_no: int = 1

    def bounds(self, now: datetime) -> tuple[datetime | None, datetime | None]:
        if self.start is not None or self.end is not None:
            return self.start, self.end
        return (now - timedelta(seconds=self.span_s) if self.span_s else None), None

    @property
    def post_filter(self) -> bool:
        return bool(self.root_cause or self.has_case)


@dataclass
class InboxPage:
    rows: list[InboxRow]
    total: int
    scanned_all: bool
    page_no: int
    clusters: list[str] = field(default_factory=list)

    @property
    def has_prev(self) -> bool:
        return self.page_no > 1

    @property
    def has_next(self) -> bool:
        return self.page_no * PAGE_SIZE < self.total


def cause_label(verdict: Verdict) -> str:
    """What the inbox counts and filters a case's current verdict under: its root cause, or
    "false positive" / "inconclusive" when it names none."""
    return verdict.root_cause or ("false positive" if verdict.kind == "false_positive" else verdict.kind.replace("_", " "))


def cases_for(rows) -> dict[tuple[str, str], Case]:
    if not rows:
        return {}
    found = Case.objects.filter(job_id__in={r.job_id for r in rows}).select_related("assignee")
    return {(c.cluster, c.job_id): c for c in found}


def inbox_page(f: InboxFilter, now: datetime | None = None) -> InboxPage:
    """One page of the inbox; the telemetry store's exceptions pass through (callers say what failed)."""
    now = now or datetime.now(timezone.utc)
    only, never = _case_job_filters(f)
    start, end = f.bounds(now)
    q = interruptions.InterruptionQuery(
        start=start, end=end,
        cluster=f.cluster or None,
        states=(f.state,) if f.state else (),
        search=f.search,
        only_jobs=only, except_jobs=never,
        limit=PAGE_SIZE,
        offset=(f.page_no - 1) * PAGE_SIZE,
    )
    page = interruptions.list_interruptions(q)
    by_job = cases_for(page.rows)
    current = Verdict.objects.current_for(c.pk for c in by_job.values())
    rows = []
    for item in page.rows:
        case = by_job.get((item.cluster, item.job_id))
        verdict = current.get(case.pk) if case else None
        if f.has_case == "yes" and case is None or f.has_case == "no" and case is not None:
            continue
        if f.root_cause and (verdict is None or cause_label(verdict).lower() != f.root_cause.lower()):
            continue
        rows.append(InboxRow(item, case, verdict))
    total = page.total
    scanned_all = True  # the case filters run in the store: every match is counted
    clusters = sorted({r.item.cluster for r in rows} | set(case_clusters()))
    return InboxPage(rows=rows, total=total, scanned_all=scanned_all, page_no=f.page_no, clusters=clusters)


def _case_job_filters(f: InboxFilter) -> tuple[tuple[tuple[str, str], ...] | None, tuple[tuple[str, str], ...]]:
    """(only these jobs or None, never these jobs) for the case filters."""
    if not f.post_filter:
        return None, ()
    keyed = {(c.cluster, c.job_id): c.pk for c in Case.objects.only("pk", "cluster", "job_id")}
    if f.has_case == "no":
        if f.root_cause:
            return (), ()  # a root cause needs a case
        return None, tuple(keyed)
    if not f.root_cause:
        return tuple(keyed), ()
    current = Verdict.objects.current_for(keyed.values())
    want = f.root_cause.lower()
    return tuple(k for k, pk in keyed.items() if pk in current and cause_label(current[pk]).lower() == want), ()


def root_cause_choices() -> list[str]:
    return list(Verdict.objects.exclude(root_cause="").order_by("root_cause")
                .values_list("root_cause", flat=True).distinct()[:200]) + ["false positive", "inconclusive"]


def case_clusters() -> list[str]:
    """Cluster names to suggest in filters and analysis forms: those cases were opened on."""
    return sorted(set(Case.objects.values_list("cluster", flat=True).distinct()[:50]))


def _utc(ts: datetime) -> datetime:
    return ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts.astimezone(timezone.utc)


def weekly_figures(span_s: int | None, cluster: str | None, now: datetime | None = None, *,
                   start: datetime | None = None, end: datetime | None = None):
    """The inbox charts: interruptions per week by final state, and cases per week by the root
    cause of their current verdict. Absolute ``start``/``end`` replace ``span_s``.
    Returns ([(title, figure)], empty)."""
    from investigations import charts

    now = now or datetime.now(timezone.utc)
    start, end = InboxFilter(span_s=span_s, start=start, end=end).bounds(now)
    weekly = interruptions.counts_by_week_and_state(start=start, end=end, cluster=cluster or None)
    case_qs = Case.objects.all()
    if start is not None:
        case_qs = case_qs.filter(t0__gte=start)
    if end is not None:
        case_qs = case_qs.filter(t0__lt=end)
    if cluster:
        case_qs = case_qs.filter(cluster=cluster)
    t0_of = dict(case_qs.values_list("pk", "t0"))
    causes = []
    for case_id, v in Verdict.objects.current_for(t0_of).items():
        week = (_utc(t0_of[case_id]) - timedelta(days=t0_of[case_id].weekday())).date()
        # Plotly draws legend and hover text as (restricted) HTML: keep user text literal.
        causes.append({"week": pd.Timestamp(week), "cause": html.escape(cause_label(v)[:40]), "n": 1})
    figures = [("per week, by final state", charts.interruptions_bar(weekly, color_by="state"))]
    if causes:
        figures.append(("cases per week, by root cause (current verdicts)",
                        charts.interruptions_bar(pd.DataFrame(causes), color_by="cause")))
    for _, fig in figures:
        # One tick and one bar-width per week: with few weeks plotly otherwise spreads a bar
        # over the whole axis and repeats day ticks.
        fig.update_xaxes(dtick=7 * 86400000, tickformat="%b %d")
        fig.update_traces(width=5 * 86400000)
    return figures, weekly.empty
