"""python manage.py ingest FILE... --format FMT — backfill telemetry from files.

Uses the same parsers, validation and writer as the HTTP endpoints: each file is
one batch, parsed and validated whole before anything of it is written, and a
re-run of the same file adds no rows. ``-`` reads standard input.
"""
from __future__ import annotations

import sys
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

FORMATS = ("prometheus", "kernel-log", "sacct", "csv", "jsonl", "parquet")


class Command(BaseCommand):
    help = "Ingest telemetry files (text scrapes, kernel logs, sacct -P output, CSV/JSONL/Parquet in the documented schema)."

    def add_arguments(self, parser):
        parser.add_argument("files", nargs="+", metavar="FILE", help="files to ingest ('-' for standard input)")
        parser.add_argument("--format", required=True, choices=FORMATS, dest="fmt")
        parser.add_argument("--cluster", default=None, help="cluster name (default: $PRECURSOR_CLUSTER or 'default')")
        parser.add_argument("--host", default=None,
                            help="host for scrape series / kernel lines that name none")
        parser.add_argument("--table", default="samples",
                            help="target table for csv/jsonl/parquet: samples, events, jobs, job_hosts, hosts, components")
        parser.add_argument("--ts", type=int, default=None,
                            help="scrape time in ms since the epoch for prometheus files without timestamps "
                                 "(default: the file's modification time)")
        parser.add_argument("--year", type=int, default=None, help="year of syslog-style kernel lines (they carry none)")
        parser.add_argument("--tz", default=None,
                            help="IANA time zone (e.g. America/Los_Angeles) of times written without one: CSV/JSONL/"
                                 "Parquet times, sacct times, dmesg -T / syslog times (default: UTC)")
        parser.add_argument("--skip-expired", action="store_true",
                            help="leave out (and count) rows older than the tables' retention instead of refusing "
                                 "the file")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")

    def handle(self, *args, files, fmt, cluster, host, table, ts, year, no_progress, skip_expired, tz, **opts):
        from telemetry import store
        from telemetry.ingestion import service
        from telemetry.ingestion.errors import IngestError

        cluster = cluster or settings.TELEMETRY_DEFAULT_CLUSTER
        paths = []
        for name in files:
            if name != "-" and not Path(name).is_file():
                raise CommandError(f"{name}: no such file")
            paths.append(name)
        total = sum(Path(p).stat().st_size for p in paths if p != "-")
        bar = tqdm(total=total or None, unit="B", unit_scale=True, desc="ingest", file=getattr(self.stderr, "_out", sys.stderr),
                   disable=no_progress)
        totals: dict[str, int] = {}
        dropped = expired = 0
        try:
            for name in paths:
                data = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
                bar.set_postfix_str(Path(name).name if name != "-" else "stdin")
                try:
                    report = self._one(service, fmt, data, name, cluster, host, table, ts, year, skip_expired, tz)
                except IngestError as exc:
                    raise CommandError(f"{name}: {exc} — nothing of this file was stored") from None
                except (store.StoreLocked, store.StoreUnavailable) as exc:
                    raise CommandError(str(exc)) from None
                for tbl, n in report.rows.items():
                    totals[tbl] = totals.get(tbl, 0) + n
                dropped += report.dropped_blank
                expired += report.expired
                bar.update(len(data) if name != "-" else 0)
                if opts.get("verbosity", 1) > 0:  # the same summary the HTTP endpoints answer with
                    for line in report.summary_lines():
                        self.stdout.write(f"{name}: {line}")
        finally:
            bar.close()
        summary = ", ".join(f"{n} {tbl}" for tbl, n in totals.items()) or "no rows"
        extra = []
        if dropped:
            extra.append(f"{dropped} no-data samples dropped")
        if expired:
            extra.append(f"{expired} rows older than the tables' retention left out (--skip-expired)")
        self.stdout.write(f"ingested {summary} from {len(paths)} file(s) into cluster {cluster}"
                          + (f" ({'; '.join(extra)})" if extra else ""))

    @staticmethod
    def _one(service, fmt, data: bytes, name: str, cluster, host, table, ts, year, skip_expired=False, tz=None):
        from telemetry.ingestion.errors import IngestError

        if fmt in ("csv", "jsonl", "parquet"):
            return service.ingest_bulk(data, fmt, table, cluster=cluster, skip_expired=skip_expired, tz=tz)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise IngestError("not UTF-8 text", line=data[: exc.start].count(b"\n") + 1) from None
        if fmt == "prometheus":
            if ts is None:
                ts = int(Path(name).stat().st_mtime * 1000) if name != "-" else None
            result = service.parse_prometheus_text(text, cluster, default_host=host, default_ts_ms=ts)
            return service.write_samples(result, "prometheus", cluster, "ingest:prometheus", skip_expired=skip_expired)
        if fmt == "kernel-log":
            return service.write_kernel_events(*service.parse_kernel_log(text, cluster, host=host, year=year, tz=tz),
                                               cluster=cluster, skip_expired=skip_expired)
        return service.ingest_sacct(text, cluster, tz=tz)
