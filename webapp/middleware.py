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
