"""Run Precursor in one process: migrations, a real WSGI server (waitress) and,
in the embedded mode, Celery worker threads. Ctrl-C stops it cleanly."""
from __future__ import annotations

import signal
import sys

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from telemetry import migrate, retention, store


class Command(BaseCommand):
    help = "Serve Precursor (web + embedded worker threads) on one port."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--threads", type=int, default=8, help="web request threads")
        parser.add_argument("--no-worker", action="store_true", help="do not start embedded worker threads")

    def handle(self, *args, **opts):
        from waitress import wasyncore
        from waitress.server import create_server

        from investigations.services.jobs import recover_jobs
        from webapp import celery_app, worker
        from webapp.heap import freeze_startup_heap
        from webapp.wsgi import application

        # Requests waiting on a ClickHouse server never take the last two web threads.
        store.set_max_concurrent_calls(settings.TELEMETRY_MAX_CONCURRENT_CALLS or max(1, opts["threads"] - 2))
        try:
            applied = migrate.migrate(
                store.get_client(),
                migrate.Target(cluster=settings.TELEMETRY_CLUSTER, ttl_days=settings.TELEMETRY_TTL_DAYS),
                log=lambda m: self.stdout.write(m),
            )
        except (store.StoreLocked, store.StoreUnavailable, migrate.MigrationError) as exc:
            raise CommandError(str(exc)) from None
        del applied
        from telemetry import rollup

        try:
            rollup.recover(log_fn=lambda m: self.stdout.write(m))
        except Exception as exc:  # the journal stays: the next start tries again
            self.stderr.write(f"could not roll up the minutes the last run left pending: {exc}")
        note = retention.mismatch(
            migrate.Target(cluster=settings.TELEMETRY_CLUSTER, ttl_days=settings.TELEMETRY_TTL_DAYS))
        if note:
            self.stderr.write(note)
        call_command("migrate", interactive=False, verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)

        embedded = None
        if settings.EMBEDDED_WORKERS and not opts["no_worker"]:
            embedded = worker.EmbeddedWorker(celery_app, concurrency=settings.WORKER_THREADS)
            embedded.start()
            worker.set_current(embedded)
            self.stdout.write(f"worker: {settings.WORKER_THREADS} embedded Celery threads ({settings.CELERY_BROKER_URL.split(':')[0]} broker)")
        requeued = recover_jobs()
        if requeued:
            self.stdout.write(f"requeued {len(requeued)} unfinished job(s): {requeued}")

        try:
            server = create_server(
                application, host=opts["host"], port=opts["port"], threads=opts["threads"],
                ident="precursor", channel_timeout=120,
            )
        except OSError as exc:
            raise CommandError(f"cannot listen on {opts['host']}:{opts['port']}: {exc.strerror}") from None
        def interrupt(signum, frame):
            raise KeyboardInterrupt

        # Both stop it cleanly. SIGINT too, explicitly: a process started in the background by a
        # non-interactive shell inherits SIGINT ignored, and Python then leaves it ignored.
        signal.signal(signal.SIGTERM, interrupt)
        signal.signal(signal.SIGINT, interrupt)
        freeze_startup_heap()  # again: the worker and the server were set up after the wsgi import
        self.stdout.write(f"Precursor is running at http://{opts['host']}:{opts['port']}/  (Ctrl-C to stop)")
        sys.stdout.flush()
        try:
            # waitress's own run() closes its wake-up pipe before in-flight requests
            # finish; drive the loop ourselves so they drain first.
            wasyncore.loop(timeout=server.adj.asyncore_loop_timeout, map=server._map, use_poll=server.adj.asyncore_use_poll)
        except KeyboardInterrupt:
            self.stdout.write("stopping…")
        finally:
            server.accepting = False
            server.task_dispatcher.shutdown(timeout=15)
            server.close()
            try:
                rollup.stop()  # feed the rollups of the last pushes (else the next start does, from the journal)
            except Exception as exc:
                self.stderr.write(f"could not feed the last rollups (the next start will): {exc}")
            if embedded is not None:
                embedded.stop()
                worker.set_current(None)
            self.stdout.write("stopped")
