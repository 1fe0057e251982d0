"""User entries of the metric catalog: custom metrics and aliases, kept in the telemetry store.

The catalog in code (``telemetry.catalog``) covers the usual exporters; a site has its own
names (a job's ``mem_free_pct``, a vendor's fan sensor). Users add them from the catalog
page, the API or a file (the Django side edits; this module is the one place that reads
and writes them), and every process merges them into ``telemetry.catalog`` so ingestion,
the picker, permalinks, the overlay, scans, fleet tests and exports all see the same names.

- Entries live in ``metric_catalog`` (migration 0008): one row per change, the highest
  ``version`` of a name is current, ``deleted`` retires it, older rows are the history.
- ``refresh()`` reloads them into ``telemetry.catalog`` at most every few seconds per
  process (the web middleware, ingestion and jobs call it), so an entry added in one
  process reaches the others without a restart.
- ``add_alias(..., rewrite=True)``: names already stored under the alias are moved to the
  metric (``rewrite_stored``): re-inserted under the new name (scaled; the rollup views
  build its minutes), then deleted under the old one. No re-ingest needed.
"""
from __future__ import annotations

import csv
import io
import json
import threading
import time
from dataclasses import asdict, dataclass

from telemetry import catalog, store

METRIC, ALIAS = "metric", "alias"
REFRESH_S = 5.0
_DAY_MS = 86_400_000
_REWRITE_DAYS = 89  # an INSERT ... SELECT window touches at most 90 daily partitions
_COLUMNS = ("name", "version", "entry", "target", "layer", "unit", "kind", "bad", "component", "description",
            "scale", "deleted", "changed", "changed_by")

_state = {"checked": 0.0, "loaded": None}
_lock = threading.Lock()


class CatalogError(ValueError):
    """An entry that cannot be added (bad field, clash with the catalog); nothing was stored."""


@dataclass(frozen=True)
class Entry:
    name: str
    entry: str  # metric | alias
    target: str = ""  # alias: the catalog name it maps to
    layer: str = ""
    unit: str = ""
    kind: str = ""
    bad: str = ""
    component: str = ""
    description: str = ""
    scale: float = 1.0
    deleted: bool = False
    version: int = 0
    changed: str = ""  # ISO time of the change
    changed_by: str = ""

    def as_metric(self) -> catalog.Metric:
        return catalog.Metric(name=self.name, layer=self.layer, unit=self.unit, kind=self.kind, bad=self.bad,
                              component=self.component, description=self.description)

    def as_dict(self) -> dict:
        return asdict(self)


def _rows(sql: str, params: dict | None = None, client=None) -> list[tuple]:
    if client is not None:
        return client.query(sql, parameters=params or {}).result_rows
    return store.query_rows(sql, params, tag="catalog:read", timeout_s=20)


def _entry(row) -> Entry:
    values = dict(zip(_COLUMNS, row))
    changed = values["changed"]
    return Entry(name=values["name"], entry=values["entry"], target=values["target"], layer=values["layer"],
                 unit=values["unit"], kind=values["kind"], bad=values["bad"], component=values["component"],
                 description=values["description"], scale=float(values["scale"]), deleted=bool(values["deleted"]),
                 version=int(values["version"]),
                 changed=changed.isoformat() if hasattr(changed, "isoformat") else str(changed),
                 changed_by=values["changed_by"])


def current(client=None) -> list[Entry]:
    """The live entries (newest version of each name, not deleted), by name."""
    cols = ", ".join(f"argMax({c}, version)" if c not in ("name", "version") else
                     ("name" if c == "name" else "max(version)") for c in _COLUMNS)
    rows = _rows(f"SELECT {cols} FROM metric_catalog GROUP BY name ORDER BY name", client=client)
    return [e for e in map(_entry, rows) if not e.deleted]


def history(name: str | None = None) -> list[Entry]:
    """Every version (newest first), of one name or all."""
    where = "WHERE name = {name:String}" if name else ""
    rows = _rows(f"SELECT {', '.join(_COLUMNS)} FROM metric_catalog {where} ORDER BY version DESC LIMIT 1000",
                 {"name": name} if name else None)
    return list(map(_entry, rows))


def _split(entries: list[Entry]) -> tuple[list[catalog.Metric], list[tuple[str, str, float]]]:
    metrics = [e.as_metric() for e in entries if e.entry == METRIC]
    aliases = [(e.name, e.target, e.scale) for e in entries if e.entry == ALIAS]
    return metrics, aliases


def _apply(entries: list[Entry]) -> None:
    from telemetry.ingestion import normalize  # the parsers' caches hold names resolved before

    key = tuple(sorted((e.name, e.version) for e in entries))
    if key == _state["loaded"]:
        return
    catalog.extend(*_split(entries))
    _state["loaded"] = key
    normalize.forget_label_sets()


def refresh(*, force: bool = False) -> None:
    """Load the user entries into ``telemetry.catalog`` (at most every REFRESH_S unless forced).
    A store that cannot answer (not migrated yet, down) leaves the catalog as it is."""
    now = time.monotonic()
    if not force and now - _state["checked"] < REFRESH_S:
        return
    with _lock:
        if not force and now - _state["checked"] < REFRESH_S:
            return
        _state["checked"] = now
        try:
            entries = current()
        except Exception:  # the catalog in code still works; the next call tries again
            _state["checked"] = now - REFRESH_S + 1.0
            return
        _apply(entries)


def _check(new: Entry) -> None:
    """Would the catalog still be consistent with ``new``? CatalogError naming why not."""
    entries = [e for e in current() if e.name != new.name]
    if not new.deleted:
        entries.append(new)
    try:
        catalog.build_extended(*_split(entries))
    except ValueError as exc:
        raise CatalogError(str(exc)) from None


def _write(new: Entry, actor: str) -> Entry:
    version = time.time_ns() // 1000
    new = Entry(**{**new.as_dict(), "version": version, "changed_by": actor[:200]})
    row = [getattr(new, c) if c not in ("changed", "deleted") else None for c in _COLUMNS]
    row[_COLUMNS.index("deleted")] = int(new.deleted)
    row[_COLUMNS.index("changed")] = version // 1000
    import pyarrow as pa

    table = pa.table({c: [v] for c, v in zip(_COLUMNS, row)}).cast(pa.schema([
        (c, pa.uint64() if c == "version" else pa.float64() if c == "scale" else pa.uint8() if c == "deleted"
         else pa.timestamp("ms", tz="UTC") if c == "changed" else pa.string()) for c in _COLUMNS]))
    store.get_client().insert_arrow("metric_catalog", table,
                                    settings={"insert_deduplication_token": f"metric_catalog:{new.name}:{version}"})
    refresh(force=True)
    return next((e for e in history(new.name) if e.version == version), new)


def add_metric(name: str, *, layer: str, unit: str, kind: str, bad: str, component: str = "",
               description: str = "", actor: str) -> Entry:
    """A custom metric (name ``<prefix>.<snake_name>``, the prefix that of its layer)."""
    new = Entry(name=name.strip(), entry=METRIC, layer=layer.strip(), unit=unit.strip(), kind=kind.strip(),
                bad=bad.strip(), component=component.strip(), description=description.strip() or name.strip())
    _check(new)
    return _write(new, actor)


def add_alias(alias: str, target: str, *, scale: float = 1.0, actor: str, rewrite: bool = True) -> tuple[Entry, int]:
    """Map a source name to a catalog metric; with ``rewrite`` the rows already stored under
    the alias move to the metric. Returns (entry, rows moved)."""
    alias, target = alias.strip(), target.strip()
    if not alias:
        raise CatalogError("the alias must not be empty")
    try:
        scale = float(scale)
    except (TypeError, ValueError):
        raise CatalogError(f"scale must be a number, got {scale!r}") from None
    if not scale or scale != scale:
        raise CatalogError("scale must be a non-zero number")
    new = Entry(name=alias, entry=ALIAS, target=target, scale=scale)
    _check(new)
    entry = _write(new, actor)
    moved = rewrite_stored(alias, target, scale) if rewrite else 0
    return entry, moved


def remove(name: str, *, actor: str) -> Entry:
    """Retire a user entry (its history stays)."""
    live = {e.name: e for e in current()}
    if name not in live:
        raise CatalogError(f"{name!r} is not a user entry of the catalog (entries in code cannot be removed)")
    new = Entry(**{**live[name].as_dict(), "deleted": True})
    _check(new)
    return _write(new, actor)


def _local(table: str) -> str:
    cfg = store.config()
    return f"{table}_local ON CLUSTER {cfg.cluster}" if cfg.cluster else table


def rewrite_stored(alias: str, target: str, scale: float = 1.0) -> int:
    """Move the samples stored under ``alias`` to ``target`` (value x ``scale``); returns rows moved."""
    from telemetry import rollup

    rollup.flush_pending()  # pushed rows not yet rolled up would roll under the alias after the delete
    (lo, hi, n), = store.query_rows(
        "SELECT toUnixTimestamp64Milli(min(ts)), toUnixTimestamp64Milli(max(ts)), count() FROM samples "
        "WHERE metric = {alias:String}", {"alias": alias}, tag="catalog:rewrite", timeout_s=600)
    if not n:
        return 0
    step = _REWRITE_DAYS * _DAY_MS
    start = lo // _DAY_MS * _DAY_MS
    while start <= hi:
        store.command(
            # No "AS metric": ClickHouse lets WHERE see SELECT aliases, so it would compare the new name.
            "INSERT INTO samples (ts, cluster, host, component, metric, value) "
            "SELECT ts, cluster, host, component, {target:String}, value * {scale:Float64} "
            "FROM samples WHERE metric = {alias:String} "
            "AND ts >= fromUnixTimestamp64Milli({lo:Int64}) AND ts < fromUnixTimestamp64Milli({hi:Int64})",
            {"target": target, "scale": float(scale), "alias": alias, "lo": start, "hi": start + step},
            tag="catalog:rewrite")
        start += step
    # the labels kept beside those series (telemetry.ingestion.series_labels) follow them
    store.command("INSERT INTO series_labels (cluster, host, component, metric, labels, first_seen, last_seen) "
                  "SELECT cluster, host, component, {target:String}, labels, first_seen, last_seen "
                  "FROM series_labels FINAL WHERE metric = {alias:String}",
                  {"target": target, "alias": alias}, tag="catalog:rewrite")
    for table in ("samples", "samples_1m", "band_1m", "series_labels"):
        store.command(f"ALTER TABLE {_local(table)} DELETE WHERE metric = {{alias:String}} "
                      "SETTINGS mutations_sync = 2", {"alias": alias}, tag="catalog:rewrite")
    return int(n)


def stored_names() -> list[tuple[str, int]]:
    """(metric name, rows) of every name in the store, from the one-minute rollup."""
    return [(m, int(n)) for m, n in store.query_rows(
        "SELECT metric, sum(count) FROM samples_1m GROUP BY metric ORDER BY metric", tag="catalog:names",
        timeout_s=60)]


def unknown_stored() -> list[tuple[str, int]]:
    """Names stored that the catalog does not know (candidates for an alias or a new metric)."""
    refresh()
    return [(m, n) for m, n in stored_names() if m not in catalog.CATALOG]


# --- files ---------------------------------------------------------------------------------

FILE_FIELDS = ("entry", "name", "target", "layer", "unit", "kind", "bad", "component", "description", "scale")


def read_file(data: bytes) -> list[dict]:
    """Entries from a CSV (header: entry,name,target,layer,unit,kind,bad,component,description,scale)
    or JSON (a list of objects with those keys) file."""
    text = data.decode("utf-8-sig")
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except ValueError as exc:
            raise CatalogError(f"not valid JSON: {exc}") from None
    else:
        items = list(csv.DictReader(io.StringIO(text)))
    out = []
    for i, item in enumerate(items, 1):
        if not isinstance(item, dict):
            raise CatalogError(f"entry {i}: not an object")
        extra = set(item) - set(FILE_FIELDS)
        if extra:
            raise CatalogError(f"entry {i}: unknown field(s) {', '.join(sorted(extra))} (fields: {', '.join(FILE_FIELDS)})")
        kind = (item.get("entry") or "").strip()
        if kind not in (METRIC, ALIAS):
            raise CatalogError(f"entry {i}: 'entry' must be metric or alias, got {kind!r}")
        out.append({k: (v if v is not None else "") for k, v in item.items()})
    return out


def import_entries(items: list[dict], *, actor: str, rewrite: bool = True) -> list[str]:
    """Add every entry (metrics first, so aliases may point at them); lines describing each."""
    done = []
    for item in sorted(items, key=lambda d: d["entry"] != METRIC):
        if item["entry"] == METRIC:
            e = add_metric(item["name"], layer=item.get("layer", ""), unit=item.get("unit", ""),
                           kind=item.get("kind", ""), bad=item.get("bad", ""), component=item.get("component", ""),
                           description=item.get("description", ""), actor=actor)
            done.append(f"metric {e.name} ({e.layer}, {e.unit}, {e.kind}, bad {e.bad})")
        else:
            e, moved = add_alias(item["name"], item.get("target", ""), scale=item.get("scale") or 1.0, actor=actor,
                                 rewrite=rewrite)
            done.append(f"alias {e.name} -> {e.target}" + (f" ({moved} stored rows moved)" if moved else ""))
    return done
