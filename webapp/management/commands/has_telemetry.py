"""Exit 0 when the telemetry store holds samples, 1 when it is empty (used by ./precursor demo)."""
import sys

from django.core.management.base import BaseCommand, CommandError

from telemetry import store
from telemetry.queries import overview


class Command(BaseCommand):
    help = "Exit status 0 if the telemetry store has samples, 1 if it is empty."

    def add_arguments(self, parser):
        parser.add_argument("--quiet", action="store_true")

    def handle(self, *args, **opts):
        try:
            count = overview.sample_count()
        except (store.StoreLocked, store.StoreUnavailable) as exc:
            raise CommandError(str(exc)) from None
        if not opts["quiet"]:
            self.stdout.write(f"{count} samples")
        sys.exit(0 if count else 1)
