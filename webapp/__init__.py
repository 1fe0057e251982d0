"""Precursor's Django project: settings, URLs, API wiring, Celery app, serve command."""
from webapp.celery import app as celery_app

__all__ = ("celery_app",)
