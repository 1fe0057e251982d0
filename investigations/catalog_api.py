"""API of the metric catalog: list it (with names stored that it does not know), add custom
metrics and aliases, remove them, read an entry's history. Changes need the admin role and
are audited (investigations.services.catalog)."""
from __future__ import annotations

from ninja import Router, Schema, Status
from ninja.errors import HttpError

from investigations.services import catalog as catalog_service
from investigations.workspace_api import service_errors
from telemetry import catalog_store

router = Router(tags=["catalog"])


class MetricIn(Schema):
    name: str
    layer: str
    unit: str
    kind: str
    bad: str
    component: str = ""
    description: str = ""


class AliasIn(Schema):
    alias: str
    metric: str
    scale: float = 1.0
    rewrite: bool = True  # move rows already stored under the alias to the metric


def _entry(entry: catalog_store.Entry) -> dict:
    return entry.as_dict()


def _catalog_errors():
    return service_errors()  # CatalogError is a ValueError: 400 with its message


@router.get("/catalog")
def catalog_list(request):
    """Every metric (code and user entries, with rows stored), user aliases, unknown stored names."""
    return catalog_service.catalog_table()


@router.post("/catalog/metrics", response={201: dict})
def catalog_add_metric(request, payload: MetricIn):
    with _catalog_errors():
        entry = catalog_service.add_catalog_metric(request.user, **payload.dict())
    return Status(201, _entry(entry))


@router.post("/catalog/aliases", response={201: dict})
def catalog_add_alias(request, payload: AliasIn):
    with _catalog_errors():
        entry, moved = catalog_service.add_catalog_alias(request.user, alias=payload.alias, metric=payload.metric,
                                                         scale=payload.scale, rewrite=payload.rewrite)
    return Status(201, {**_entry(entry), "rows_moved": moved})


@router.delete("/catalog/entries/{name}")
def catalog_remove(request, name: str):
    with _catalog_errors():
        return _entry(catalog_service.remove_catalog_entry(request.user, name=name))


@router.get("/catalog/entries/{name}/history")
def catalog_history(request, name: str):
    versions = catalog_store.history(name)
    if not versions:
        raise HttpError(404, f"{name!r} has no user entry")
    return [_entry(v) for v in versions]
