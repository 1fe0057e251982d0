"""python manage.py bench NAME [--json] — figures and ratios against the raw engine."""
from __future__ import annotations

import importlib
import json
import pkgutil
import sys

from django.core.management.base import BaseCommand, CommandError

# Benchmarks live beside what they measure: <package>.benchmarks.<module> with add_arguments and
# run. Module ``ingest_fleet`` is ``bench ingest-fleet``.
PACKAGES = ("telemetry.benchmarks", "investigations.benchmarks")


def _modules() -> dict[str, str]:
    found = {}
    for package in PACKAGES:
        try:
            pkg = importlib.import_module(package)
        except ModuleNotFoundError:
            continue
        for m in pkgutil.iter_modules(pkg.__path__):
            if not m.name.startswith("_"):
                found.setdefault(m.name.replace("_", "-"), f"{package}.{m.name}")
    return found


def available() -> list[str]:
    """Benchmark names: module ``ingest_fleet`` is ``bench ingest-fleet``."""
    return sorted(_modules())


def _module(name: str):
    return importlib.import_module(_modules()[name.replace("_", "-")])


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
        from webapp.heap import freeze_startup_heap

        module = _module(opts["name"])
        opts["freeze_heap"] = freeze_startup_heap

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
