"""Apply pending telemetry-store migrations (safe to run again)."""
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from telemetry import migrate, store


class Command(BaseCommand):
    help = "Apply pending ClickHouse migrations of the telemetry store; --print shows the DDL instead."

    def add_arguments(self, parser):
        parser.add_argument("--print", action="store_true", help="print the DDL for this target and exit")
        parser.add_argument("--cluster", default=None, help="render for this ClickHouse cluster (with --print)")

    def handle(self, *args, **opts):
        target = migrate.Target(
            cluster=opts["cluster"] if opts["cluster"] is not None else settings.TELEMETRY_CLUSTER,
            ttl_days=settings.TELEMETRY_TTL_DAYS,
        )
        if opts["print"]:
            for migration in migrate.discover():
                self.stdout.write(f"-- {migration.name}")
                for sql in migrate.render_migration(migration, target):
                    self.stdout.write(sql + ";\n")
            return
        try:
            applied = migrate.migrate(store.get_client(), target, log=lambda m: self.stdout.write(m))
        except (store.StoreLocked, store.StoreUnavailable, migrate.MigrationError) as exc:
            raise CommandError(str(exc)) from None
        if not applied:
            self.stdout.write("telemetry store is up to date")
