#!/usr/bin/env python
"""Precursor's command line: python manage.py serve | migrate_telemetry | simulate_fleet | ingest | bench ..."""
import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    from webapp.env import ConfigError

    try:
        from django.core.management import execute_from_command_line

        execute_from_command_line(sys.argv)
    except ConfigError as exc:
        print(f"precursor: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
