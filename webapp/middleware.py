"""Login everywhere, except where a view opts out and the API (which answers 401 itself)."""
from django.contrib.auth.middleware import LoginRequiredMiddleware


class PrecursorLoginRequired(LoginRequiredMiddleware):
    def process_view(self, request, view_func, view_args, view_kwargs):
        # django-ninja authenticates per operation (session or API token) and answers 401,
        # which API clients understand better than a redirect to an HTML login page.
        if request.path_info.startswith("/api/"):
            return None
        return super().process_view(request, view_func, view_args, view_kwargs)


def catalog_refresh(get_response):
    """User entries of the metric catalog (added in any process) reach this one's pages
    within a few seconds: ``telemetry.catalog_store.refresh`` is rate-limited and never raises."""
    from telemetry import catalog_store

    def middleware(request):
        if not request.path_info.startswith(("/static/", "/healthz", "/api/ingest/")):
            catalog_store.refresh()
        return get_response(request)

    return middleware


DISPLAY_TZ_SESSION_KEY = "display_tz"


def display_time_zone(get_response):
    """Pages show times in UTC unless the person chose an IANA zone (stored in the session by
    the top bar's selector, investigations.views.account.set_display_tz); Django's ``date``
    filter and the ``when`` filter then write times in that zone."""
    from zoneinfo import ZoneInfo

    from django.utils import timezone

    def middleware(request):
        name = request.session.get(DISPLAY_TZ_SESSION_KEY) if hasattr(request, "session") else None
        request.display_tz = "UTC"
        if name:
            try:
                timezone.activate(ZoneInfo(name))
                request.display_tz = name
            except (ValueError, LookupError):  # a zone the system no longer knows: UTC
                timezone.deactivate()
        try:
            return get_response(request)
        finally:
            timezone.deactivate()

    return middleware
