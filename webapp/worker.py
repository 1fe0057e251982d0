"""Celery worker threads inside the serving process (embedded mode).

chDB locks its data dir to one process, so in the embedded mode the web server
and the worker share a process. We run Celery's own WorkController with the
``threads`` pool in a background thread: the same consumer, acks, prefetch and
task machinery as a ``celery worker`` process, minus its signal handlers and
banner (those belong to a process that owns the main thread).
"""
from __future__ import annotations

import logging
import threading

from celery.worker import WorkController

log = logging.getLogger(__name__)


class EmbeddedWorker:
    def __init__(self, app, *, concurrency: int = 2, queues: tuple[str, ...] = ("interactive", "analysis")):
        self.app = app
        self.concurrency = concurrency
        self.queues = queues
        self._ready = threading.Event()
        self._controller: WorkController | None = None
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def start(self, timeout: float = 30.0) -> None:
        self._thread = threading.Thread(target=self._run, name="celery-embedded", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError(f"embedded Celery worker not ready after {timeout:.0f} s: {self.error}")
        if self.error is not None:
            raise RuntimeError(f"embedded Celery worker failed to start: {self.error}")

    def _build(self) -> WorkController:
        # Built inside the worker thread: Celery's Django fix-up closes the database
        # connections of the thread that builds the controller, which must not be
        # a request thread (or a test's transaction).
        return WorkController(
            app=self.app,
            pool_cls="threads",
            concurrency=self.concurrency,
            queues=list(self.queues),
            hostname=f"embedded@{__import__('socket').gethostname()}",
            without_heartbeat=True,
            without_mingle=True,
            without_gossip=True,
            ready_callback=lambda *args: self._ready.set(),
            loglevel=logging.WARNING,
        )

    def _run(self) -> None:
        try:
            self._controller = self._build()
            self._controller.start()
        except BaseException as exc:  # surfaced through /healthz and start()
            self.error = exc
            log.exception("embedded Celery worker stopped")
            self._ready.set()

    @property
    def alive(self) -> bool:
        return bool(self._thread and self._thread.is_alive() and self.error is None)

    def stop(self, timeout: float = 20.0) -> None:
        if self._controller is not None:
            self._controller.stop(in_sighandler=False, exitcode=0)
        if self._thread is not None:
            self._thread.join(timeout)


_current: EmbeddedWorker | None = None


def set_current(worker: EmbeddedWorker | None) -> None:
    global _current
    _current = worker


def current() -> EmbeddedWorker | None:
    return _current
