"""python manage.py create_token NAME [--user U] — an ingest API token, printed once."""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from investigations import tokens


class Command(BaseCommand):
    help = ("Create an API token for the /api/ingest endpoints (Prometheus remote_write, scrape relays, "
            "kernel-log and sacct shippers). The plaintext is printed once; only its hash is stored.")

    def add_arguments(self, parser):
        parser.add_argument("name", help="what will push with it, e.g. prometheus-rack12")
        parser.add_argument("--user", default=None, help="username recorded as the token's creator")
        parser.add_argument("--revoke", action="store_true", help="revoke the token whose prefix is NAME instead")

    def handle(self, *args, name, user, revoke: bool, **opts):
        if revoke:
            count = tokens.revoke(name)
            if not count:
                raise CommandError(f"no live token with prefix {name!r}")
            self.stdout.write(f"revoked {count} token(s) with prefix {name}")
            return
        creator = None
        if user:
            creator = get_user_model().objects.filter(username=user).first()
            if creator is None:
                raise CommandError(f"no user {user!r}")
        try:
            token, plaintext = tokens.create_token(name, creator)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stderr.write(f"token {token.prefix} ({token.name}) created; it is shown only now:")
        self.stdout.write(plaintext)
