"""python manage.py bench NAME [--json] — figures and ratios against the raw engine."""
from __future__ import annotations

import importlib
import json
import pkgutil
import sys

from django.core.management.base import BaseCommand, CommandError

import webapp.benchmarks as benchmarks


def available() -> list[str]:
    """Benchmark names: module ``ingest_fleet`` is ``bench ingest-fleet``."""
    return sorted(m.name.replace("_", "-") for m in pkgutil.iter_modules(benchmarks.__path__)
                  if not m.name.startswith("_"))


def _module(name: str):
    return importlib.import_module(f"webapp.benchmarks.{name.replace('-', '_')}")


class Command(BaseCommand):
    help = "Run a benchmark: " + ", ".join(available())

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="name", required=True)
        for name in available():
            module = _module(name)
            p = sub.add_parser(name, help=(module.__doc__ or "").strip().splitlines()[0] if module.__doc__ else name)
            p.add_argument("--json", action="store_true", help="print one JSON object (for scripts)")
            module.add_arguments(p)

    def handle(self, *args, **opts):
        from telemetry import store

        module = _module(opts["name"])

        def progress(message: str) -> None:
            if not opts["json"]:
                self.stderr.write(message)

        try:
            result = module.run(opts, progress)
        except (store.StoreLocked, store.StoreUnavailable) as exc:
            raise CommandError(str(exc)) from None
        if opts["json"]:
            sys.stdout.write(json.dumps(result) + "\n")
        else:
            width = max(len(k) for k in result) if result else 0
            for key, value in result.items():
                self.stdout.write(f"{key:<{width}}  {value}")
