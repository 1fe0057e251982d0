"""Routes of the investigation pages (the API lives under /api/, see investigations/api.py)."""
from django.urls import path

from investigations import account_views, views

urlpatterns = [
    path("", views.inbox, name="inbox"),
    path("inbox/chart", views.inbox_chart, name="inbox-chart"),
    path("interruptions/open", views.open_interruption, name="open-interruption"),
    path("cases/<int:pk>/", views.case_page, name="case"),
    path("cases/<int:pk>/overlay", views.case_overlay, name="case-overlay"),
    path("cases/<int:pk>/topology", views.case_topology, name="case-topology"),
    path("cases/<int:pk>/differences", views.case_differences, name="case-differences"),
    path("cases/<int:pk>/activity", views.case_activity, name="case-activity"),
    path("cases/<int:pk>/pin", views.case_pin, name="case-pin"),
    path("cases/<int:pk>/link", views.case_link, name="case-link"),
    path("cases/<int:pk>/verdict", views.case_verdict, name="case-verdict"),
    path("cases/<int:pk>/comment", views.case_comment, name="case-comment"),
    path("cases/<int:pk>/assign", views.case_assign, name="case-assign"),
    path("cases/<int:pk>/status", views.case_status, name="case-status"),
    path("board/", views.board_page, name="board"),
    path("hypotheses/<int:pk>/", views.hypothesis_page, name="hypothesis"),
    path("hypotheses/<int:pk>/comment", views.hypothesis_comment, name="hypothesis-comment"),
    path("hypotheses/<int:pk>/status", views.hypothesis_status, name="hypothesis-status"),
    path("hypotheses/<int:pk>/test", views.hypothesis_test, name="hypothesis-test"),
    path("search/", views.search, name="search"),
    path("audit/", views.audit_page, name="audit"),
    path("account/tokens", account_views.api_tokens, name="api-tokens"),
    path("account/tokens/new", account_views.api_token_create, name="api-token-create"),
    path("account/tokens/<str:prefix>/revoke", account_views.api_token_revoke, name="api-token-revoke"),
    path("jobs/", views.jobs_page, name="jobs"),
    path("jobs/<int:job_id>/", views.job_page, name="job"),
    path("jobs/<int:job_id>/progress", views.job_progress, name="job-progress"),
    path("jobs/<int:job_id>/cancel", views.job_cancel, name="job-cancel"),
    path("jobs/scan", views.scan_start, name="scan-start"),
    path("jobs/<int:job_id>/pin", views.scan_pin, name="scan-pin"),
    path("assets/plotly-<str:version>.min.js", views.plotly_js, name="plotly-js"),
    path("static/<path:path>", views.static_asset, name="static-asset"),
]
