"""Create (or update) a user with a role: viewer, investigator or admin."""
import getpass
import os

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from investigations.roles import ROLES, set_role


class Command(BaseCommand):
    help = "Create or update a Precursor user. The password comes from --password, $PRECURSOR_PASSWORD, or a prompt."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--role", choices=ROLES, default="investigator")
        parser.add_argument("--password", default=None)
        parser.add_argument("--email", default="")

    def handle(self, *args, username, role, password, email, **opts):
        password = password or os.environ.get("PRECURSOR_PASSWORD")
        if not password:
            if not os.isatty(0):
                raise CommandError("no password: pass --password or set PRECURSOR_PASSWORD (stdin is not a terminal)")
            password = getpass.getpass(f"password for {username}: ")
        if len(password) < 8:
            raise CommandError("the password must have at least 8 characters")
        user, created = get_user_model().objects.get_or_create(username=username, defaults={"email": email})
        user.set_password(password)
        user.save()
        set_role(user, role)
        self.stdout.write(f"{'created' if created else 'updated'} {username} ({role})")
