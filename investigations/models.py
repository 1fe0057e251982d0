"""Django models of the investigation workspace. Background jobs live here so
their state is durable: the broker only wakes workers."""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.urls import reverse

from telemetry.rules import COMPONENT_SCOPES, CONDITIONS, OPERATORS


class BackgroundJob(models.Model):
    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"

    ACTIVE = (State.QUEUED, State.RUNNING)

    kind = models.CharField(max_length=64)
    params = models.JSONField(default=dict)
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED, db_index=True)
    stage = models.CharField(max_length=200, blank=True, default="")
    progress_done = models.BigIntegerField(default=0)
    progress_total = models.BigIntegerField(default=0)
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    attempts = models.PositiveIntegerField(default=0)
    cancel_requested = models.BooleanField(default=False)
    worker = models.CharField(max_length=200, blank=True, default="")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    # The hypothesis a job is about (a fleet test's), so its jobs are one indexed join away.
    hypothesis = models.ForeignKey("Hypothesis", null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="jobs")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["kind", "state"])]

    def __str__(self):
        return f"job {self.pk} {self.kind} ({self.state})"

    @property
    def fraction(self) -> float:
        if self.state == self.State.SUCCEEDED:
            return 1.0
        return min(1.0, self.progress_done / self.progress_total) if self.progress_total else 0.0

    @property
    def is_active(self) -> bool:
        return self.state in self.ACTIVE

    @property
    def elapsed_s(self) -> float | None:
        """Seconds of running so far (or in all, once finished); None before it starts."""
        if self.started_at is None:
            return None
        from django.utils import timezone

        return max(0.0, ((self.finished_at or timezone.now()) - self.started_at).total_seconds())

    @property
    def remaining_s(self) -> float | None:
        """A linear estimate of the seconds left from the progress so far; None while there is
        too little progress to say (under 2 % or under 2 s)."""
        elapsed = self.elapsed_s
        if self.state != self.State.RUNNING or elapsed is None or elapsed < 2:
            return None
        f = self.fraction
        if f < 0.02 or f >= 1:
            return None
        return elapsed * (1 - f) / f


# --- Investigation workspace: cases, hypotheses, verdicts, comments, audit ----------------------
# State changes go through investigations/services/*; each verb writes an AuditEvent.

# The signal vocabulary of a hypothesis is defined once, in telemetry/rules.py.


class Case(models.Model):
    """One investigation around one interrupted job (cluster, job_id)."""

    class Status(models.TextChoices):
        OPEN = "open"
        CLOSED = "closed"

    cluster = models.CharField(max_length=200)
    job_id = models.CharField(max_length=200)
    job_name = models.CharField(max_length=500, blank=True, default="")
    state = models.CharField(max_length=32)  # Slurm final state at t0
    t0 = models.DateTimeField(db_index=True)
    n_hosts = models.PositiveIntegerField(default=0)
    hosts = models.JSONField(default=list)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN, db_index=True)
    assignee = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="assigned_cases")
    opened_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL,
                                  related_name="opened_cases")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-t0", "-pk"]
        constraints = [models.UniqueConstraint(fields=["cluster", "job_id"], name="case_unique_job")]

    def __str__(self):
        return f"Case #{self.pk} {self.cluster}/{self.job_id}"

    def get_absolute_url(self) -> str:
        return reverse("case", args=[self.pk])

    @property
    def current_verdict(self):
        """Newest verdict row, or None: history is every row, nothing is overwritten."""
        return self.verdicts.newest_first().first()


class Hypothesis(models.Model):
    """A suspected precursor: a signal condition that predicts an outcome."""

    class Status(models.TextChoices):
        PROPOSED = "proposed"
        TESTING = "testing"
        CONFIRMED = "confirmed"
        REJECTED = "rejected"

    statement = models.TextField()  # stored verbatim; templates escape it
    metric = models.CharField(max_length=200)  # canonical name from telemetry.catalog
    component_scope = models.CharField(max_length=16, choices=[(s, s) for s in COMPONENT_SCOPES])
    condition = models.CharField(max_length=16, choices=[(c, c) for c in CONDITIONS])
    operator = models.CharField(max_length=1, choices=[(o, o) for o in OPERATORS], default=">")
    threshold = models.FloatField()
    lead_window_s = models.PositiveIntegerField()
    outcome = models.CharField(max_length=500)
    # A second signal the first combines with: "and|then METRIC [cond] >|< N within N min"
    # (telemetry.queries.together parses it; '' = the first signal alone).
    combined_with = models.CharField(max_length=300, blank=True, default="")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PROPOSED, db_index=True)
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL,
                               related_name="hypotheses")
    cases = models.ManyToManyField(Case, through="CaseHypothesis", related_name="hypotheses")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True, db_index=True)  # = last activity

    class Meta:
        ordering = ["-updated_at", "-pk"]

    def __str__(self):
        return f"{self.short_id} {self.statement[:60]}"

    @property
    def short_id(self) -> str:
        return f"H{self.pk}"

    def get_absolute_url(self) -> str:
        return reverse("hypothesis", args=[self.pk])

    @property
    def signal_text(self) -> str:
        """One line: 'gpu.pcie.replay_count rate > 5 on gpu, 6h before'."""
        pair = f" {self.combined_with}" if self.combined_with else ""
        return (f"{self.metric} {self.condition} {self.operator} {self.threshold:g} on {self.component_scope}{pair}, "
                f"{_duration(self.lead_window_s)} before")


def _duration(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


class CaseHypothesis(models.Model):
    case = models.ForeignKey(Case, on_delete=models.CASCADE, related_name="pins")
    hypothesis = models.ForeignKey(Hypothesis, on_delete=models.CASCADE, related_name="pins")
    pinned_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL,
                                  related_name="+")
    pinned_at = models.DateTimeField(auto_now_add=True)
    note = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["pinned_at", "pk"]
        constraints = [models.UniqueConstraint(fields=["case", "hypothesis"], name="pin_unique_case_hypothesis")]

    def __str__(self):
        return f"H{self.hypothesis_id} on case #{self.case_id}"


class AppendOnly(Exception):
    pass


class VerdictQuerySet(models.QuerySet):
    def newest_first(self):
        return self.order_by("-created_at", "-pk")

    def current(self) -> dict[int, "Verdict"]:
        """The one definition of a case's current verdict: its newest row (by time, then id).
        Returns {case_id: verdict} for the cases in this queryset that have one."""
        found: dict[int, Verdict] = {}
        for v in self.order_by("case_id", "-created_at", "-pk"):
            found.setdefault(v.case_id, v)
        return found

    def current_for(self, case_ids) -> dict[int, "Verdict"]:
        return self.filter(case_id__in=list(case_ids)).current()


class Verdict(models.Model):
    """A judgement on a case. Rows are never updated or deleted; the newest row is current
    (``Verdict.objects.current()`` / ``Case.current_verdict``)."""

    class Kind(models.TextChoices):
        CONFIRMED = "confirmed"
        FALSE_POSITIVE = "false_positive"
        INCONCLUSIVE = "inconclusive"

    case = models.ForeignKey(Case, on_delete=models.PROTECT, related_name="verdicts")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    hypothesis = models.ForeignKey(Hypothesis, null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="verdicts")
    root_cause = models.CharField(max_length=500, blank=True, default="")
    rationale = models.TextField()
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    objects = VerdictQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [models.CheckConstraint(condition=~models.Q(rationale=""), name="verdict_rationale_required")]

    def __str__(self):
        return f"{self.kind} on case #{self.case_id}"

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise AppendOnly("verdicts are history: record a new verdict instead of changing one")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnly("verdicts are history and are never deleted")


class Comment(models.Model):
    case = models.ForeignKey(Case, null=True, blank=True, on_delete=models.CASCADE, related_name="comments")
    hypothesis = models.ForeignKey(Hypothesis, null=True, blank=True, on_delete=models.CASCADE,
                                   related_name="comments")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    body = models.TextField()  # stored verbatim; templates escape it
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "pk"]
        constraints = [
            models.CheckConstraint(
                condition=(models.Q(case__isnull=False, hypothesis__isnull=True)
                           | models.Q(case__isnull=True, hypothesis__isnull=False)),
                name="comment_on_exactly_one_target",
            )
        ]

    def __str__(self):
        target = f"case #{self.case_id}" if self.case_id else f"H{self.hypothesis_id}"
        return f"comment {self.pk} on {target}"


class AuditEvent(models.Model):
    """Who did what, when: the case timeline and the admins' audit log."""

    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="+")
    verb = models.CharField(max_length=64, db_index=True)
    case = models.ForeignKey(Case, null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_events")
    hypothesis = models.ForeignKey(Hypothesis, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="audit_events")
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self):
        who = self.actor.get_username() if self.actor_id else "system"
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {who} {self.verb}"


class Preference(models.Model):
    """One person's settings that outlive a session: the time zone pages show times in (an IANA
    name, UTC by default; chosen in the top bar, see investigations.views.account.set_display_tz)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="preference")
    display_tz = models.CharField(max_length=64, default="UTC")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self):
        return f"{self.user_id}: {self.display_tz}"


from investigations.tokens import ApiToken  # noqa: F401,E402
