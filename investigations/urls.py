"""Routes of the investigation pages (the API lives under /api/, see webapp/api.py).
Static files, plotly.js included, are served by WhiteNoise (webapp/settings.py)."""
from django.urls import path

from investigations.views import account, cases, exports, hypotheses, inbox, jobs

urlpatterns = [
    path("", inbox.inbox, name="inbox"),
    path("inbox/chart", inbox.inbox_chart, name="inbox-chart"),
    path("interruptions/open", inbox.open_interruption, name="open-interruption"),
    path("search/", inbox.search, name="search"),
    path("cases/<int:pk>/", cases.case_page, name="case"),
    path("cases/<int:pk>/overlay", cases.case_overlay, name="case-overlay"),
    path("cases/<int:pk>/topology", cases.case_topology, name="case-topology"),
    path("cases/<int:pk>/differences", cases.case_differences, name="case-differences"),
    path("cases/<int:pk>/activity", cases.case_activity, name="case-activity"),
    path("cases/<int:pk>/pin", cases.case_pin, name="case-pin"),
    path("cases/<int:pk>/link", cases.case_link, name="case-link"),
    path("cases/<int:pk>/verdict", cases.case_verdict, name="case-verdict"),
    path("cases/<int:pk>/comment", cases.case_comment, name="case-comment"),
    path("cases/<int:pk>/assign", cases.case_assign, name="case-assign"),
    path("cases/<int:pk>/status", cases.case_status, name="case-status"),
    path("board/", hypotheses.board_page, name="board"),
    path("hypotheses/<int:pk>/", hypotheses.hypothesis_page, name="hypothesis"),
    path("hypotheses/<int:pk>/comment", hypotheses.hypothesis_comment, name="hypothesis-comment"),
    path("hypotheses/<int:pk>/status", hypotheses.hypothesis_status, name="hypothesis-status"),
    path("hypotheses/<int:pk>/test", hypotheses.hypothesis_fleet_test, name="hypothesis-fleet-test"),
    path("audit/", account.audit_page, name="audit"),
    path("account/tokens", account.api_tokens, name="api-tokens"),
    path("account/tokens/new", account.api_token_create, name="api-token-create"),
    path("account/tokens/<str:prefix>/revoke", account.api_token_revoke, name="api-token-revoke"),
    path("jobs/", jobs.jobs_page, name="jobs"),
    path("jobs/<int:job_id>/", jobs.job_page, name="job"),
    path("jobs/<int:job_id>/progress", jobs.job_progress, name="job-progress"),
    path("jobs/<int:job_id>/cancel", jobs.job_cancel, name="job-cancel"),
    path("jobs/scan", jobs.scan_start, name="scan-start"),
    path("jobs/<int:job_id>/pin", jobs.scan_pin, name="scan-pin"),
    path("exports/", exports.exports_page, name="exports"),
    path("exports/new", exports.export_start, name="export-start"),
    path("jobs/<int:job_id>/download", exports.export_download, name="export-download"),
]
