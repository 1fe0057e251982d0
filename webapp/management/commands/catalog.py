"""python manage.py catalog — the user part of the metric catalog from the command line.

    catalog list                         every user entry and the stored names the catalog does not know
    catalog import FILE [--no-rewrite]   add entries from a CSV or JSON file (see the README)
    catalog alias SOURCE METRIC [--scale X] [--no-rewrite]
    catalog remove NAME
Changes are recorded with --actor (default: the OS user) as their author.
"""
from __future__ import annotations

import getpass
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from telemetry import catalog_store, store


class Command(BaseCommand):
    help = "List, import, alias or remove user entries of the metric catalog."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=("list", "import", "alias", "remove"))
        parser.add_argument("args", nargs="*")
        parser.add_argument("--scale", type=float, default=1.0)
        parser.add_argument("--no-rewrite", action="store_true",
                            help="do not move rows already stored under an alias to its metric")
        parser.add_argument("--actor", default=None, help="author recorded with the change")

    def handle(self, *args, action, scale, no_rewrite, actor, **opts):
        actor = f"cli:{actor or getpass.getuser()}"
        names = list(args)
        try:
            if action == "list":
                catalog_store.refresh(force=True)
                for e in catalog_store.current():
                    what = f"-> {e.target} x{e.scale:g}" if e.entry == "alias" else \
                        f"{e.layer} {e.unit} {e.kind} bad {e.bad} ({e.component or 'host'})"
                    self.stdout.write(f"{e.entry:6} {e.name} {what}  v{e.version} by {e.changed_by}")
                for name, rows in catalog_store.unknown_stored():
                    self.stdout.write(f"unknown {name} ({rows} rows stored)")
            elif action == "import":
                if len(names) != 1 or not Path(names[0]).is_file():
                    raise CommandError("catalog import FILE: one existing file")
                done = catalog_store.import_entries(catalog_store.read_file(Path(names[0]).read_bytes()),
                                                    actor=actor, rewrite=not no_rewrite)
                for line in done:
                    self.stdout.write(f"added {line}")
            elif action == "alias":
                if len(names) != 2:
                    raise CommandError("catalog alias SOURCE METRIC")
                entry, moved = catalog_store.add_alias(names[0], names[1], scale=scale, actor=actor,
                                                       rewrite=not no_rewrite)
                self.stdout.write(f"added alias {entry.name} -> {entry.target}; {moved} stored rows moved")
            else:
                if len(names) != 1:
                    raise CommandError("catalog remove NAME")
                catalog_store.remove(names[0], actor=actor)
                self.stdout.write(f"removed {names[0]}")
        except catalog_store.CatalogError as exc:
            raise CommandError(str(exc)) from None
        except (store.StoreLocked, store.StoreUnavailable) as exc:
            raise CommandError(str(exc)) from None
