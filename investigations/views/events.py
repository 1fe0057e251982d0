"""Events and hosts: every event (XIDs, link flaps, port-module events) by host, component,
code and time, with filters, a weekly chart and the "without a job" lane; a host page with
its inventory, jobs and events; and the catalog page where admins map unknown names.

Thin: the lists come from telemetry.queries.events, the catalog from
investigations.services.catalog."""
from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from investigations import charts
from investigations.roles import is_admin
from investigations.services import catalog as catalog_service
from investigations.views.common import store_error_message
from telemetry import catalog, catalog_store, timebounds
from telemetry.queries import events as ev, host_signals

PAGE_SIZE = 100


def _query(g, *, host: str = "", limit: int = PAGE_SIZE, page: int = 1) -> ev.EventQuery:
    kinds = tuple(k for k in g.getlist("kind") if k)
    codes = tuple(int(c) for c in g.get("code", "").replace(" ", "").split(",") if c.lstrip("-").isdigit())
    start, end = timebounds.parse_range(g.get("from"), g.get("to"))
    return ev.EventQuery(
        cluster=g.get("cluster", "").strip() or None, host=host or g.get("host", "").strip(),
        component=g.get("component", "").strip(), kinds=kinds, codes=codes,
        start=start, end=end,
        without_job=g.get("without_job") == "1", limit=limit, offset=(page - 1) * limit,
    )


def _page_no(g) -> int:
    raw = g.get("page", "1")
    return max(1, int(raw)) if raw.isdigit() else 1


def events_page(request, host: str = ""):
    """/events/ (and the events part of a host page): filters, weekly chart, the list."""
    g = request.GET
    page_no = _page_no(g)
    try:
        q = _query(g, host=host, page=page_no)
    except ValueError as exc:
        return render(request, "investigations/events.html", {"error": f"Bad filter: {exc}", "nav": "events"},
                      status=400)
    ctx = {"nav": "events", "g": g, "kinds": ev.KINDS_OF_INTEREST, "host": host, "page_no": page_no}
    try:
        page = ev.list_events(q)
        weekly = ev.weekly_counts(q)
        summary = ev.host_summary(q.cluster or _cluster_of(host), host) if host else None
    except Exception as exc:  # the page still renders and says what is wrong
        ctx["error"] = store_error_message(exc)
        return render(request, "investigations/host.html" if host else "investigations/events.html", ctx)
    params = {k: v for k, v in g.items() if k != "page" and v}
    last_page = max(1, -(-page.total // PAGE_SIZE))
    if host:
        ctx.update(_signals(summary.cluster, host, q))
    ctx.update({
        "page": page, "summary": summary, "figure": charts.events_weekly_bar(weekly) if weekly else None,
        "has_prev": page_no > 1, "has_next": page_no < last_page, "last_page": last_page,
        "prev_url": "?" + urlencode({**params, "page": min(page_no - 1, last_page)}),
        "next_url": "?" + urlencode({**params, "page": page_no + 1}),
        "first_url": "?" + urlencode({**params, "page": 1}),
    })
    return render(request, "investigations/host.html" if host else "investigations/events.html", ctx)


def _signals(cluster: str, host: str, q: ev.EventQuery) -> dict:
    """The host page's signals panel: its main signals over the filters' range (the last days up
    to its newest sample without one), drawn by the case overlay's chart, with samples and gaps."""
    try:
        found = host_signals.host_signals(cluster, host, q.start, q.end)
    except Exception as exc:  # the rest of the page still renders
        return {"signals_error": store_error_message(exc)}
    figure = charts.overlay_figure(found.result, height_per_row=150, webgl=False) if found.result is not None else None
    return {"signals": found, "signals_figure": figure}


def _cluster_of(host: str) -> str:
    found = [c for c, h in ev.hosts_matching(host, limit=50) if h == host]
    return found[0] if found else ""


def host_page(request, name: str):
    """/hosts/<name>/: its main signals over the range (chart first, samples and gaps), inventory,
    jobs, event counts, and its events with the same filters."""
    return events_page(request, host=name)


# --- catalog ---------------------------------------------------------------------------------

def catalog_page(request):
    """Every metric (code and user entries, rows stored); unknown stored names at the top with
    'map to…' and 'add as new metric' for admins."""
    try:
        table = catalog_service.catalog_table()
    except Exception as exc:
        return render(request, "investigations/catalog.html", {"nav": "catalog", "error": store_error_message(exc)})
    return render(request, "investigations/catalog.html", {
        "nav": "catalog", "table": table, "can_edit": is_admin(request.user), "layers": catalog.LAYERS,
        "kinds": catalog.KINDS, "bads": catalog.BAD_DIRECTIONS, "components": catalog.COMPONENT_KINDS,
        "names": sorted(catalog.CATALOG),
    })


@require_POST
def catalog_add(request):
    """One form: an optional new metric, then the alias mapping an unknown name to it (or to an
    existing metric)."""
    p = request.POST
    try:
        if p.get("new_name"):
            catalog_service.add_catalog_metric(
                request.user, name=p["new_name"], layer=p.get("layer", ""), unit=p.get("unit", ""),
                kind=p.get("kind", ""), bad=p.get("bad", ""), component=p.get("component", ""),
                description=p.get("description", ""))
            messages.success(request, f"Added metric {p['new_name']}.")
        if p.get("alias"):
            target = p.get("new_name") or p.get("target", "")
            entry, moved = catalog_service.add_catalog_alias(request.user, alias=p["alias"], metric=target,
                                                             scale=p.get("scale") or 1.0)
            messages.success(request, f"{entry.name} now maps to {entry.target}; {moved} stored rows moved.")
    except PermissionDenied as exc:
        messages.error(request, str(exc))
    except (catalog_store.CatalogError, ValueError) as exc:
        messages.error(request, f"Not added: {exc}")
    return redirect("catalog")
