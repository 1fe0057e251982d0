"""Investigations: interruptions inbox, cases, hypotheses, verdicts, comments, audit,
correlation jobs (Celery tasks), dataset exports, pages and API routers."""
