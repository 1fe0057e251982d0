"""Django models of the investigation workspace. Background jobs live here so
their state is durable: the broker only wakes workers."""
from __future__ import annotations

from django.conf import settings
from django.db import models


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
from investigations.tokens import ApiToken  # noqa: F401,E402
