"""Pages of the investigation workspace, one module per feature:

- ``inbox``       the inbox, its charts, opening a case from an interruption, search
- ``cases``       a case's page and its fragments (overlay, topology, "what's different"), its verbs
- ``hypotheses``  the board, a hypothesis's page and its verbs (status, comment, fleet test)
- ``jobs``        background jobs: list, one job's page and progress, cancel, signal scans
- ``exports``     labelled-dataset exports
- ``account``     the signed-in person's API tokens, and the audit log for admins

Thin: every change goes through a service verb (investigations/services), every telemetry read
through a query runner (telemetry/queries) or a service that prepares it for pages and API alike
(services/inbox.py, services/case_signals.py), permalinks through investigations/permalinks.py,
and formatting through the template filters in investigations/templatetags/precursor.py.
"""
