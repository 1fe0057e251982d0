"""Benchmarks of the workspace's HTTP paths (the ingest API through a running ``serve``), run by
``python manage.py bench NAME``; telemetry's own are in telemetry/benchmarks/."""
