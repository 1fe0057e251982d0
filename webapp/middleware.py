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
    """Pages show times in UTC unless the person chose an IANA zone in the top bar's selector
    (investigations.views.account.set_display_tz), which saves it to their account
    (investigations.models.Preference) and to the session. A session without a choice takes the
    account's once (one query per session, not per request). Django's ``date`` filter and the
    ``when`` filters then write times in that zone."""
    from zoneinfo import ZoneInfo

    from django.utils import timezone

    def middleware(request):
        if request.path_info.startswith("/api/ingest/"):
            # pushes carry a token, not a session, and show no times: no session or user to load
            # (~2 % of the interpreter-lock time of bench ingest-fleet's text phase, py-spy)
            request.display_tz = "UTC"
            return get_response(request)
        session = getattr(request, "session", None)
        name = session.get(DISPLAY_TZ_SESSION_KEY) if session is not None else None
        if name is None and session is not None and getattr(request, "user", None) is not None \
                and request.user.is_authenticated:
            from investigations.models import Preference

            name = session[DISPLAY_TZ_SESSION_KEY] = (
                Preference.objects.filter(user=request.user).values_list("display_tz", flat=True).first() or "UTC")
        request.display_tz = "UTC"
        if name and name != "UTC":
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


INGEST_SAMPLE_PATHS = ("/api/ingest/prometheus", "/api/ingest/remote-write")


def ingest_arriving(get_response):
    """A text scrape or remote-write push counts as *arriving* at the samples group commit while
    this process handles it (auth, body, parse), so an insert due meanwhile waits for its rows
    (the commit delay, ``telemetry.ingestion.group_commit``) and stores them in the same group."""
    from telemetry.ingestion import group_commit

    def middleware(request):
        if request.method != "POST" or not request.path_info.startswith(INGEST_SAMPLE_PATHS):
            return get_response(request)
        with group_commit.committer("samples").arriving():
            return get_response(request)

    return middleware
