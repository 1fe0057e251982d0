"""Apply pending telemetry-store migrations and the configured retention (safe to run again)."""
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from telemetry import migrate, retention, store


class Command(BaseCommand):
    help = ("Apply pending ClickHouse migrations of the telemetry store and make every table's TTL "
            "TELEMETRY_TTL_DAYS (0 = keep forever); --print shows the DDL instead.")

    def add_arguments(self, parser):
        parser.add_argument("--print", action="store_true", help="print the DDL for this target and exit")
        parser.add_argument("--cluster", default=None, help="render for this ClickHouse cluster (with --print)")
        parser.add_argument("--shorten-retention", action="store_true",
                            help="apply a TELEMETRY_TTL_DAYS shorter than the tables' TTL "
                                 "(deletes the stored rows older than it)")

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
            client = store.get_client()
            applied = migrate.migrate(client, target, log=lambda m: self.stdout.write(m))
            changed = retention.apply(client, target, allow_shorter=opts["shorten_retention"],
                                      log=lambda m: self.stdout.write(m))
        except (store.StoreLocked, store.StoreUnavailable, migrate.MigrationError,
                retention.RetentionRefused) as exc:
            raise CommandError(str(exc)) from None
        if not applied and not changed:
            days = target.ttl_days
            self.stdout.write("telemetry store is up to date (retention: "
                              + ("forever" if not days else f"{days} days") + ")")
