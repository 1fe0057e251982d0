"""API schemas of the investigation workspace (django-ninja): what comes in, what goes out.

Free text (statements, rationales, comments) goes out exactly as it was stored; clients
that render it must escape it, as the templates do."""
from __future__ import annotations

from datetime import datetime

from ninja import Field, Schema

from telemetry.rules import COMPONENT_SCOPES, CONDITIONS, LEAD_WINDOW_MAX_S, LEAD_WINDOW_MIN_S


def _username(user) -> str | None:
    return user.get_username() if user is not None else None


class CaseIn(Schema):
    cluster: str = Field(..., description="cluster of the interrupted job")
    job_id: str = Field(..., description="scheduler job id")


class CaseUpdate(Schema):
    status: str | None = Field(None, description="open or closed")
    assignee: str | None = Field(None, description="username; empty string or null unassigns (when given)")


class VerdictIn(Schema):
    kind: str = Field(..., description="confirmed, false_positive or inconclusive")
    rationale: str = Field(..., description="required: why")
    hypothesis_id: int | None = Field(None, description="the hypothesis confirmed (must be pinned to the case)")
    root_cause: str = ""


class VerdictOut(Schema):
    id: int
    case_id: int
    kind: str
    hypothesis_id: int | None
    root_cause: str
    rationale: str
    author: str | None
    created_at: datetime

    @staticmethod
    def resolve_author(obj) -> str | None:
        return _username(obj.author)


class CaseOut(Schema):
    id: int
    url: str
    cluster: str
    job_id: str
    job_name: str
    state: str
    t0: datetime
    n_hosts: int
    hosts: list[str]
    status: str
    assignee: str | None
    opened_by: str | None
    created_at: datetime
    updated_at: datetime
    current_verdict: VerdictOut | None
    hypothesis_ids: list[int]

    @staticmethod
    def resolve_url(obj) -> str:
        return obj.get_absolute_url()

    @staticmethod
    def resolve_assignee(obj) -> str | None:
        return _username(obj.assignee)

    @staticmethod
    def resolve_opened_by(obj) -> str | None:
        return _username(obj.opened_by)

    # .all() (not a fresh query) so lists can prefetch pins and verdicts; both keep their Meta ordering.
    @staticmethod
    def resolve_current_verdict(obj):
        rows = list(obj.verdicts.all())  # newest first
        return rows[0] if rows else None

    @staticmethod
    def resolve_hypothesis_ids(obj) -> list[int]:
        return [pin.hypothesis_id for pin in obj.pins.all()]


class HypothesisIn(Schema):
    statement: str
    metric: str = Field(..., description="canonical metric name (or alias) from the metric catalog")
    component_scope: str = Field(..., description=" | ".join(COMPONENT_SCOPES))
    condition: str = Field(..., description=" | ".join(CONDITIONS))
    operator: str = Field(">", description="> or <")
    threshold: float
    lead_window_s: int = Field(..., description="how long before the interruption the signal fires, seconds "
                               f"({LEAD_WINDOW_MIN_S}..{LEAD_WINDOW_MAX_S}; checked by telemetry.rules.check_lead_window)")
    outcome: str = Field(..., description="the interruption class or root cause it predicts, e.g. 'XID 79'")
    combined_with: str = Field("", description="a second signal, usually of another layer: 'and|then METRIC "
                               "[threshold|rate|trend|rise] >|< NUMBER within N min' ('and': both within N min of each "
                               "other; 'then': the second within N min after the first); '' for the signal alone")
    case_id: int | None = Field(None, description="pin to this case as well")
    note: str = ""


class TestSummaryOut(Schema):
    job_id: int
    lift: float | None
    p: float | None
    q: float | None
    finished_at: datetime | None
    url: str


class TrackRecordOut(Schema):
    confirmed: int
    false_positive: int
    inconclusive: int
    precision: float | None
    ci_low: float | None
    ci_high: float | None
    latest_test: TestSummaryOut | None
    linked: int
    undecided: int
    other_cause: int


class HypothesisOut(Schema):
    id: int
    short_id: str
    url: str
    statement: str
    metric: str
    component_scope: str
    condition: str
    operator: str
    threshold: float
    lead_window_s: int
    outcome: str
    combined_with: str
    status: str
    author: str | None
    created_at: datetime
    updated_at: datetime
    case_ids: list[int]
    track_record: TrackRecordOut

    @staticmethod
    def resolve_url(obj) -> str:
        return obj.get_absolute_url()

    @staticmethod
    def resolve_author(obj) -> str | None:
        return _username(obj.author)

    @staticmethod
    def resolve_case_ids(obj) -> list[int]:
        return [pin.case_id for pin in obj.pins.all()]

    @staticmethod
    def resolve_track_record(obj):
        from investigations.services.records import track_record

        # The board computes every record in one pass and attaches it.
        return getattr(obj, "_track_record", None) or track_record(obj)


class HypothesisStatusIn(Schema):
    status: str = Field(..., description="proposed | testing | confirmed | rejected")


class LinkIn(Schema):
    note: str = ""


class PinOut(Schema):
    case_id: int
    hypothesis_id: int
    pinned_by: str | None
    pinned_at: datetime
    note: str

    @staticmethod
    def resolve_pinned_by(obj) -> str | None:
        return _username(obj.pinned_by)


class CommentIn(Schema):
    body: str


class CommentOut(Schema):
    id: int
    case_id: int | None
    hypothesis_id: int | None
    author: str | None
    body: str
    created_at: datetime

    @staticmethod
    def resolve_author(obj) -> str | None:
        return _username(obj.author)


class AuditEventOut(Schema):
    id: int
    verb: str
    actor: str | None
    case_id: int | None
    hypothesis_id: int | None
    data: dict
    created_at: datetime

    @staticmethod
    def resolve_actor(obj) -> str | None:
        return _username(obj.actor)


class FleetTestIn(Schema):
    """Start a fleet test: optionally one cluster, optionally only the last ``days`` of history."""
    cluster: str | None = None
    days: int | None = None


class ScanIn(Schema):
    """Start a signal scan: which outcome, how long a lead window, how much history, which cluster."""
    outcome: str = Field(..., description="a Slurm state ('NODE_FAIL'), XID codes ('XID 79', 'XID 48/94'), "
                         "'link down', a root cause confirmed on cases ('cause: PSU': the interruptions whose "
                         "current verdict confirms it) or 'any interruption'")
    lead_window_s: int
    days: int | None = None
    cluster: str | None = None


class LagIn(Schema):
    """Start a lag analysis: which of two signals leads, and by how much."""
    a: str = Field(..., description="a catalog metric, or an event kind ('XID 79', 'link down')")
    b: str = Field(..., description="the same kinds as a, or the interruptions of an outcome ('NODE_FAIL')")
    cluster: str
    component_a: str = Field("", description="keep one component of a metric (gpu3, mlx5_0); '' all")
    component_b: str = ""
    host: str = Field("", description="one host; '' pools every host")
    days: int | None = Field(None, description="the last N days (1..366; default 7), or from/to")
    from_: str | None = Field(None, alias="from", description="a day YYYY-MM-DD or an ISO date-time, UTC")
    to: str | None = None
    step_s: int = Field(60, description="series: the step of the correlation, whole minutes")
    max_lag_s: int = Field(3600, description="how far either way to look, 60 s .. 24 h")


class ExportIn(Schema):
    """Export the verdicts as a labelled dataset (see investigations/services/exports.py)."""
    lead_window_s: int = 6 * 3600
    kinds: list[str] | None = None
    controls: bool = True
    format: str = "parquet"
    cluster: str | None = None
