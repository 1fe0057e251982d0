"""python manage.py create_token NAME [--scope ingest|api] [--user U] — an API token, printed once."""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from investigations import tokens


class Command(BaseCommand):
    help = ("Create an API token: scope 'ingest' (default) for the /api/ingest endpoints (Prometheus "
            "remote_write, scrape relays, kernel-log and sacct shippers), or scope 'api' for the workspace API, "
            "acting as --user with that user's role. The plaintext is printed once; only its hash is stored.")

    def add_arguments(self, parser):
        parser.add_argument("name", help="what will push with it, e.g. prometheus-rack12")
        parser.add_argument("--scope", choices=sorted(tokens.SCOPES), default="ingest",
                            help="ingest: machines pushing telemetry; api: a person's workspace API token")
        parser.add_argument("--user", default=None,
                            help="scope api: the user the token acts as (required); scope ingest: recorded as creator")
        parser.add_argument("--revoke", action="store_true", help="revoke the token whose prefix is NAME instead")

    def handle(self, *args, name, user, scope: str, revoke: bool, **opts):
        if revoke:
            count = tokens.revoke(name)
            if not count:
                raise CommandError(f"no live token with prefix {name!r}")
            self.stdout.write(f"revoked {count} token(s) with prefix {name}")
            return
        creator = None
        if scope == "api" and not user:
            raise CommandError("a workspace API token acts as a user: add --user NAME")
        if user:
            creator = get_user_model().objects.filter(username=user).first()
            if creator is None:
                raise CommandError(f"no user {user!r}")
        try:
            token, plaintext = tokens.create_token(name, creator, scope=scope)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        acts = f", acting as {creator.username}" if scope == "api" else ""
        self.stderr.write(f"{scope} token {token.prefix} ({token.name}{acts}) created; it is shown only now:")
        self.stdout.write(plaintext)
