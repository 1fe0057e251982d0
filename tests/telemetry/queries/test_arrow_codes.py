"""Host and part names of an Arrow result read as codes (windows.codes), never one Python string
per row: the runs of hosts, the firing minutes per part and the scores' groups come out as they
did when every row's name was a Python string."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from telemetry.queries import fleet_test, windows


def _chunked_dictionary(values: list[list[str]]) -> pa.ChunkedArray:
    # each chunk with its own dictionary, as a LowCardinality column may arrive
    return pa.chunked_array([pa.array(v).dictionary_encode() for v in values])


def test_codes_index_the_distinct_names_over_chunks_and_dictionaries():
    for column in (pa.chunked_array([["h2", "h2"], ["h1", "h2", "h10"]]),
                   _chunked_dictionary([["h2", "h2"], ["h1", "h2", "h10"]]),
                   pa.array(["h2", "h2", "h1", "h2", "h10"])):
        idx, names = windows.codes(column)
        assert [names[i] for i in idx] == ["h2", "h2", "h1", "h2", "h10"]
        assert sorted(names) == ["h1", "h10", "h2"] and idx.dtype == np.int64


def test_a_missing_name_is_its_own_code():
    idx, names = windows.codes(pa.array(["a", None, "a"]))
    assert idx[0] == idx[2] != idx[1] and names[idx[1]] == "None"


def test_host_runs_of_a_result_ordered_by_host():
    table = pa.table({"host": _chunked_dictionary([["a", "a", "b"], ["b", "c"]]), "t": pa.array(range(5))})
    assert windows.host_runs(table) == [("a", 0, 2), ("b", 2, 4), ("c", 4, 5)]
    assert windows.host_runs(table.slice(0, 0)) == []
    assert windows.host_runs(table.slice(4, 1)) == [("c", 0, 1)]


def test_firing_minutes_split_by_host_and_part():
    # a part name shared by two hosts, a host with two parts: each (host, part) its own run
    table = pa.table({"host": ["a", "a", "a", "b", "b"], "unit": ["gpu0", "gpu0", "gpu1", "gpu1", "gpu1"],
                      "t": pa.array([1000, 2000, 3000, 4000, 5000], pa.int64())})
    by_unit: dict = {}
    fleet_test._add_fires(by_unit, table)
    assert list(by_unit) == [("a", "gpu0"), ("a", "gpu1"), ("b", "gpu1")]
    assert by_unit[("a", "gpu0")].tolist() == [1.0, 2.0] and by_unit[("b", "gpu1")].tolist() == [4.0, 5.0]
