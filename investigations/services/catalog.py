"""Verbs on the user part of the metric catalog (custom metrics and aliases): admins only,
each change audited. The entries themselves live in the telemetry store
(``telemetry.catalog_store``), where ingestion and the query runners read them."""
from __future__ import annotations

from django.core.exceptions import PermissionDenied

from investigations.roles import is_admin
from investigations.services.activity import record
from telemetry import catalog, catalog_store


def _require_admin(user, what: str) -> str:
    if user is None or not getattr(user, "is_authenticated", False) or not is_admin(user):
        raise PermissionDenied(f"{what} needs the admin role")
    return user.get_username()


def add_catalog_metric(user, *, name: str, layer: str, unit: str, kind: str, bad: str, component: str = "",
                       description: str = "") -> catalog_store.Entry:
    actor = _require_admin(user, "adding a metric to the catalog")
    entry = catalog_store.add_metric(name, layer=layer, unit=unit, kind=kind, bad=bad, component=component,
                                     description=description, actor=actor)
    record(user, "catalog.metric_added", name=entry.name, layer=entry.layer, unit=entry.unit, kind=entry.kind,
           bad=entry.bad, component=entry.component, version=entry.version)
    return entry


def add_catalog_alias(user, *, alias: str, metric: str, scale: float = 1.0,
                      rewrite: bool = True) -> tuple[catalog_store.Entry, int]:
    actor = _require_admin(user, "adding an alias to the catalog")
    entry, moved = catalog_store.add_alias(alias, metric, scale=scale, actor=actor, rewrite=rewrite)
    record(user, "catalog.alias_added", alias=entry.name, metric=entry.target, scale=entry.scale,
           rows_moved=moved, version=entry.version)
    return entry, moved


def remove_catalog_entry(user, *, name: str) -> catalog_store.Entry:
    _require_admin(user, "removing a catalog entry")
    entry = catalog_store.remove(name, actor=user.get_username())
    record(user, "catalog.entry_removed", name=name, version=entry.version)
    return entry


def import_catalog_file(user, data: bytes, *, rewrite: bool = True) -> list[str]:
    actor = _require_admin(user, "importing catalog entries")
    done = catalog_store.import_entries(catalog_store.read_file(data), actor=actor, rewrite=rewrite)
    record(user, "catalog.imported", entries=done)
    return done


def catalog_table() -> dict:
    """What the catalog page and API list: every metric (code and user), the user's aliases,
    and names stored that the catalog does not know (with their rows)."""
    catalog_store.refresh()
    try:
        stored = dict(catalog_store.stored_names())
    except Exception:  # the table still lists the catalog when the store cannot count
        stored = {}
    metrics = [{"name": m.name, "layer": m.layer, "unit": m.unit, "kind": m.kind, "bad": m.bad,
                "component": m.component, "description": m.description, "aliases": list(m.all_aliases),
                "custom": m.name in catalog.USER_METRICS, "rows": stored.get(m.name, 0)}
               for m in catalog.CATALOG.values()]
    unknown = [{"name": n, "rows": r} for n, r in sorted(stored.items()) if n not in catalog.CATALOG]
    return {"metrics": metrics, "aliases": dict(catalog.USER_ALIASES), "unknown": unknown}
