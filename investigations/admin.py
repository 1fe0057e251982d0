"""Django admin for the workspace: admins can browse everything; the history (verdicts,
audit events) is read-only there, as everywhere."""
from django.contrib import admin

from investigations.models import AuditEvent, Case, CaseHypothesis, Comment, Hypothesis, Verdict


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Case)
class CaseAdmin(ReadOnlyAdmin):
    list_display = ("id", "cluster", "job_id", "job_name", "state", "t0", "status", "assignee", "updated_at")
    list_filter = ("status", "state", "cluster")
    search_fields = ("job_id", "job_name")


@admin.register(Hypothesis)
class HypothesisAdmin(ReadOnlyAdmin):
    list_display = ("id", "statement", "metric", "condition", "outcome", "status", "author", "updated_at")
    list_filter = ("status", "component_scope", "condition")
    search_fields = ("statement", "metric", "outcome")


@admin.register(CaseHypothesis)
class CaseHypothesisAdmin(ReadOnlyAdmin):
    list_display = ("case", "hypothesis", "pinned_by", "pinned_at")


@admin.register(Verdict)
class VerdictAdmin(ReadOnlyAdmin):
    list_display = ("id", "case", "kind", "hypothesis", "root_cause", "author", "created_at")
    list_filter = ("kind",)


@admin.register(Comment)
class CommentAdmin(ReadOnlyAdmin):
    list_display = ("id", "case", "hypothesis", "author", "created_at")


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "actor", "verb", "case", "hypothesis")
    list_filter = ("verb",)
    search_fields = ("verb", "actor__username")
