"""Benchmarks of the telemetry layer, beside what they measure, run by ``python manage.py bench NAME``. Each module NAME.py defines
``add_arguments(parser)`` and ``run(options, progress) -> dict`` whose dict is printed
(as JSON with --json). Every benchmark measures the raw engine in the same run so
the figures come with a ratio, never alone."""
