"""/api/ingest/*: token auth, status codes, size and rate limits, whole-batch
rejection, idempotent retries, and property tests (arbitrary bodies never give a
5xx and never a partial write)."""
from __future__ import annotations

import base64
import gzip
import math
import os
import struct
import time

import cramjam
import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from investigations.ingest_limits import rate_limiter
from investigations import tokens
from investigations.tokens import ApiToken, create_token
from telemetry import catalog, store
from telemetry.ingestion import group_commit
from telemetry.ingestion.remote_write import RWSeries, encode_write_request

NOW = (int(time.time()) // 3600 - 24) * 3_600_000  # recent enough for any TTL, fixed within the run
STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]
DCGM = (
    '# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n'
    'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1",Hostname="gpu-a001"} 41\n'
    'DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-2",Hostname="gpu-a001"} 43\n'
    'DCGM_FI_DEV_MEMORY_TEMP{gpu="1",UUID="GPU-2",Hostname="gpu-a001"} 9223372036854775794\n'
)
XID = f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(NOW / 1000))}+00:00 gpu-a001 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=7, name=python3, GPU has fallen off the bus.\n"


def samples_count(where: str = "1") -> int:
    return store.query_rows(f"SELECT count() FROM samples WHERE {where}", tag="test")[0][0]


def total_rows() -> int:
    return sum(store.query_rows(f"SELECT count() FROM {t}", tag="test")[0][0]
               for t in ("samples", "events", "jobs", "job_hosts"))


def post(client, path, body, token, content_type="text/plain", **meta):
    meta.setdefault("HTTP_AUTHORIZATION", f"Bearer {token}")
    return client.post(f"/api/ingest/{path}", data=body, content_type=content_type, **meta)


def rw(values=(1.0, 2.0), name="node_load1", instance="gpu-a001:9100"):
    labels = {"__name__": name, "instance": instance, "job": "node"}
    return encode_write_request([RWSeries(labels, [NOW + i * 1000 for i in range(len(values))], list(values))])




# --- tokens ------------------------------------------------------------------------------


def test_tokens_are_stored_hashed(db, investigator):
    tok, plaintext = create_token("relay", investigator)
    stored = ApiToken.objects.get(pk=tok.pk)
    assert plaintext not in (stored.token_hash, stored.prefix, stored.name)
    assert len(stored.token_hash) == 64 and stored.prefix in plaintext


def test_it_returns_401_without_a_token(client, clean_store, db):
    assert client.post("/api/ingest/prometheus", data=DCGM, content_type="text/plain").status_code == 401
    assert post(client, "prometheus", DCGM, "prc_nope_wrong").status_code == 401
    assert samples_count() == 0


def test_it_returns_401_for_a_revoked_token(client, clean_store, token):
    ApiToken.objects.update(revoked=True)
    assert post(client, "prometheus", DCGM, token).status_code == 401


def test_a_token_revoked_in_this_process_is_refused_at_once_although_pushes_reuse_it(client, clean_store, token):
    # pushes reuse a live ingest token for INGEST_TOKEN_CACHE_S instead of a look-up each
    assert post(client, "prometheus", DCGM, token).status_code == 200
    assert tokens.revoke(ApiToken.objects.get().prefix) == 1
    assert post(client, "prometheus", DCGM, token).status_code == 401


def test_a_token_revoked_elsewhere_is_refused_once_the_reuse_time_is_over(client, clean_store, token, settings):
    assert post(client, "prometheus", DCGM, token).status_code == 200
    ApiToken.objects.update(revoked=True)  # as another process would (this one reuses it for a while)
    settings.INGEST_TOKEN_CACHE_S = 0  # the reuse time is over: looked up again
    assert post(client, "prometheus", DCGM, token).status_code == 401


def test_a_logged_in_session_is_not_enough(alice_client, clean_store):
    response = alice_client.post("/api/ingest/prometheus", data=DCGM, content_type="text/plain")
    assert response.status_code == 401


def test_basic_auth_with_the_token_as_password_works(client, clean_store, token):
    basic = base64.b64encode(f"prometheus:{token}".encode()).decode()
    response = post(client, "prometheus", DCGM, token, HTTP_AUTHORIZATION=f"Basic {basic}")
    assert response.status_code == 200, response.content


# --- prometheus text ---------------------------------------------------------------------


def test_a_dcgm_scrape_lands_and_the_report_says_what_was_dropped(client, clean_store, token):
    response = post(client, "prometheus", DCGM, token)
    assert response.status_code == 200, response.content
    body = response.json()
    # the GPUs' identity labels are inventory rows (every clean store: their label sets are new again)
    assert body["rows"] == {"samples": 2, "components": 2} and body["dropped_blank"] == 1
    assert samples_count(f"metric = '{catalog.resolve('DCGM_FI_DEV_GPU_TEMP').name}' AND host = 'gpu-a001'") == 2


def test_query_parameters_set_cluster_host_and_scrape_time(client, clean_store, token):
    response = client.post(f"/api/ingest/prometheus?cluster=east&host=gpu-z1&ts={NOW}", data="node_load1 3\n",
                           content_type="text/plain", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.content
    assert store.query_rows("SELECT cluster, host, toUnixTimestamp64Milli(ts) FROM samples", tag="test") == [
        ("east", "gpu-z1", NOW)]


def test_gzip_bodies_are_accepted(client, clean_store, token):
    response = post(client, "prometheus", gzip.compress(DCGM.encode()), token, HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 200, response.content
    assert samples_count() == 2


def test_a_bad_line_gives_400_naming_line_field_reason_and_stores_nothing(client, clean_store, token):
    bad = DCGM + 'DCGM_FI_DEV_GPU_TEMP{gpu="2",Hostname="gpu-a001"} hot\n'
    response = post(client, "prometheus", bad, token)
    assert response.status_code == 400
    body = response.json()
    assert body["line"] == 5 and body["reason"] and "nothing stored" in body["error"]
    assert samples_count() == 0
    # the request no longer counts as arriving: an insert does not wait for it (commit delay)
    assert group_commit.committer("samples")._batcher._arriving == 0


def test_a_retried_scrape_with_its_time_adds_no_rows(client, clean_store, token):
    for _ in range(2):
        response = client.post(f"/api/ingest/prometheus?ts={NOW}", data=DCGM, content_type="text/plain",
                               headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 200
    assert samples_count() == 2


# --- size and rate limits ----------------------------------------------------------------


def test_a_body_over_the_limit_gets_413_before_parsing(client, clean_store, token, settings):
    settings.INGEST_MAX_BODY_BYTES = 2048
    body = "node_load1{instance=\"h:1\"} 1\n" * 200
    response = post(client, "prometheus", body, token)
    assert response.status_code == 413
    assert response.json()["field"] == "body"
    assert samples_count() == 0


def test_a_gzip_bomb_gets_413(client, clean_store, token, settings):
    settings.INGEST_MAX_BODY_BYTES = 4096
    bomb = gzip.compress(b"#" * 1_000_000)
    assert len(bomb) < 4096
    response = post(client, "prometheus", bomb, token, HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 413


def test_the_rate_limit_is_per_token_and_says_when_to_retry(client, clean_store, token, investigator, settings):
    settings.INGEST_RATE_PER_MINUTE = 3
    other = create_token("other", investigator)[1]
    started = time.monotonic()
    codes = [post(client, "prometheus", "", token).status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    limited = post(client, "prometheus", "", token)
    elapsed = time.monotonic() - started
    # 3 a minute: one every 20 s once the burst of 3 is spent; the next is admitted ~20 s after the
    # burst (not at the end of the current minute) — less whatever time the requests took on a
    # loaded machine (the bucket refills meanwhile), never more
    assert limited.status_code == 429
    assert 20 - math.ceil(elapsed) <= int(limited["Retry-After"]) <= 20
    assert post(client, "prometheus", "", other).status_code == 200


def test_retry_after_is_the_time_until_the_bucket_admits_the_next_request():
    from investigations.ingest_limits import RateLimiter, retry_after

    now = [1000.0]
    limiter = RateLimiter(clock=lambda: now[0])
    assert [limiter.hit(7, 3) for _ in range(3)] == [0, 0, 0]  # a full bucket: 3 at once
    assert limiter.hit(7, 3) == pytest.approx(20.0)
    now[0] += 19.5
    assert limiter.hit(7, 3) == pytest.approx(0.5) and retry_after(0.5) == "1"
    now[0] += 0.5
    assert limiter.hit(7, 3) == 0  # admitted exactly when it said
    assert limiter.hit(7, 3) == pytest.approx(20.0)
    assert limiter.hit(8, 3) == 0  # per token
    now[0] += 60  # a quiet minute fills the bucket again, no more
    assert [limiter.hit(7, 3) for _ in range(4)] == [0, 0, 0, pytest.approx(20.0)]


# --- remote write ------------------------------------------------------------------------


def test_remote_write_answers_200_without_a_body_and_stores_samples_but_not_stale_markers(client, clean_store, token):
    response = post(client, "remote-write", rw((1.0, STALE, 3.0)), token, "application/x-protobuf",
                    HTTP_CONTENT_ENCODING="snappy")
    assert response.status_code == 200, response.content
    assert response.content == b"" and response["Content-Length"] == "0"
    assert store.query_rows("SELECT host, value FROM samples ORDER BY ts", tag="test") == [
        ("gpu-a001", 1.0), ("gpu-a001", 3.0)]


def test_a_retried_remote_write_adds_no_rows(client, clean_store, token):
    body = rw((1.0, 2.0, 3.0))
    for _ in range(2):
        assert post(client, "remote-write", body, token, "application/x-protobuf",
                    HTTP_CONTENT_ENCODING="snappy").status_code == 200
    assert samples_count() == 3


def test_remote_write_rejects_bad_data_with_400_so_it_is_not_retried(client, clean_store, token):
    response = post(client, "remote-write", bytes(cramjam.snappy.compress_raw(b"\xff\xff\xff")), token,
                    "application/x-protobuf", HTTP_CONTENT_ENCODING="snappy")
    assert response.status_code == 400
    assert response.json()["field"] == "body"


@pytest.mark.parametrize("content_type, encoding", [
    ("application/x-protobuf", ""),
    ("application/x-protobuf", "gzip"),
    ("application/json", "snappy"),
    ("application/x-protobuf;proto=io.prometheus.write.v2.Request", "snappy"),
])
def test_remote_write_answers_415_to_other_encodings_and_versions(client, clean_store, token, content_type, encoding):
    headers = {"HTTP_CONTENT_ENCODING": encoding} if encoding else {}
    response = post(client, "remote-write", rw(), token, content_type, **headers)
    assert response.status_code == 415
    assert samples_count() == 0


def test_remote_write_1_0_with_the_explicit_proto_parameter_is_accepted(client, clean_store, token):
    response = post(client, "remote-write", rw(), token, "application/x-protobuf;proto=prometheus.WriteRequest",
                    HTTP_CONTENT_ENCODING="snappy")
    assert response.status_code == 200


def test_a_store_failure_gives_503_so_senders_retry(client, clean_store, token, monkeypatch):
    from telemetry import writer

    def down(*args, **kwargs):
        raise store.StoreUnavailable("cannot reach the ClickHouse server")

    monkeypatch.setattr(writer, "write", down)  # the real store cannot be made to fail on cue here
    response = post(client, "remote-write", rw(), token, "application/x-protobuf", HTTP_CONTENT_ENCODING="snappy")
    assert response.status_code == 503 and response["Retry-After"]


# --- kernel log and sacct ----------------------------------------------------------------


def test_kernel_log_xids_become_events(client, clean_store, token):
    body = "some other kernel line\n" + XID
    response = post(client, "kernel-log", body, token)
    assert response.status_code == 200, response.content
    assert response.json()["rows"] == {"events": 1} and response.json()["skipped_lines"] == 1
    assert store.query_rows("SELECT host, code, attributes['pci_bus_id'] FROM events", tag="test") == [
        ("gpu-a001", 79, "0000:18:00.0")]


def test_a_malformed_xid_line_gives_400_naming_the_line(client, clean_store, token):
    response = post(client, "kernel-log", XID + "NVRM: Xid (PCI:zz): what\n", token)
    assert response.status_code == 400 and response.json()["line"] == 2
    assert total_rows() == 0


def test_sacct_gives_jobs_and_allocations(client, clean_store, token):
    body = "JobID|State|NodeList|Start|End\n900|NODE_FAIL|gpu-a[001-002]|2026-01-01T00:00:00|2026-01-01T01:00:00\n"
    response = post(client, "sacct", body, token)
    assert response.status_code == 200, response.content
    assert response.json()["rows"] == {"jobs": 1, "job_hosts": 2}
    assert post(client, "sacct", body, token).status_code == 200
    assert store.query_rows("SELECT count() FROM job_hosts", tag="test") == [(2,)]


def test_stats_show_what_landed(client, clean_store, token):
    post(client, "prometheus", DCGM, token)
    response = client.get("/api/ingest/stats", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200
    temp = catalog.resolve("DCGM_FI_DEV_GPU_TEMP").name
    assert response.json()["samples"][temp]["rows"] == 2
    before = response.json()["group_commit"]  # this process's samples group commit (all clusters)
    post(client, "prometheus", DCGM, token)
    after = client.get("/api/ingest/stats", headers={"Authorization": f"Bearer {token}"}).json()["group_commit"]
    assert after["inserts"] == before["inserts"] + 1 and after["requests"] == before["requests"] + 1
    assert after["rows"] - before["rows"] == 2
    for which in ("remote_write_scanner", "text_template_read"):
        scanner = response.json()[which]
        assert scanner in ("compiled", "numpy")
        if os.environ.get("CI") == "true":  # CI's install builds the compiled code
            assert scanner == "compiled", which


# --- property tests ----------------------------------------------------------------------

_PROPS = hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
_text_bodies = st.one_of(
    st.text(max_size=400),
    st.lists(st.sampled_from([
        DCGM, XID, "JobID|State\n", "1|COMPLETED\n", 'x{a="1"} 1\n', "# TYPE x gauge\n", "node_load1 NaN\n",
        "NVRM: Xid (PCI:0000:01:00): 1\n", "|||\n", "\n", '{"ts": 1}\n', "\x00", "2|BOGUS\n", "x 1 99999999999999999999\n",
    ]), max_size=8).map("".join),
)


@pytest.mark.slow
@pytest.mark.parametrize("path", ["prometheus", "kernel-log", "sacct"])
def test_arbitrary_text_bodies_never_give_5xx_or_a_partial_write(client, clean_store, token, path):
    @_PROPS
    @given(body=_text_bodies)
    def check(body):
        rate_limiter.reset()
        before = total_rows()
        response = post(client, path, body.encode("utf-8", "surrogatepass"), token)
        assert response.status_code < 500, response.content
        if response.status_code != 200:
            assert total_rows() == before
            assert response.json()["reason"]

    check()


def test_arbitrary_remote_write_bodies_never_give_5xx_or_a_partial_write(client, clean_store, token):
    @_PROPS
    @given(raw=st.binary(max_size=300), compress=st.booleans(), bad_series=st.booleans())
    def check(raw, compress, bad_series):
        rate_limiter.reset()
        body = bytes(cramjam.snappy.compress_raw(raw)) if compress else raw
        if bad_series:
            # a valid series followed by one without a host: the valid one must not land either
            body = encode_write_request([
                RWSeries({"__name__": "node_load1", "instance": "h:1"}, [NOW], [1.0]),
                RWSeries({"__name__": "node_load1"}, [NOW], [2.0]),
            ])
        before = total_rows()
        response = post(client, "remote-write", body, token, "application/x-protobuf",
                        HTTP_CONTENT_ENCODING="snappy")
        # 413: random bytes that declare a decompressed size over the limit (checked before inflating)
        assert response.status_code in (200, 400, 413), response.content
        if response.status_code != 200:
            assert total_rows() == before

    check()


def _redis_url() -> str | None:
    import redis

    url = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/15"
    try:
        redis.Redis.from_url(url, socket_connect_timeout=1).ping()
    except Exception:
        return None
    return url


@pytest.mark.services
def test_the_rate_limit_counts_in_redis_when_configured(client, clean_store, token, settings):
    url = _redis_url()
    if url is None:
        pytest.skip("no Redis on 127.0.0.1:6379 (.ci/run starts one)")
    import redis

    settings.REDIS_URL = url
    settings.INGEST_RATE_PER_MINUTE = 2
    limiter_client = rate_limiter._redis
    rate_limiter._redis = None
    try:
        codes = [post(client, "prometheus", "", token).status_code for _ in range(3)]
        rate_limiter.reset()  # clears only the in-process fallback: Redis still holds the window
        codes.append(post(client, "prometheus", "", token).status_code)
        keys = redis.Redis.from_url(url).keys("precursor:ingest-rate:*")
        assert codes == [200, 200, 429, 429]
        assert keys
        # The bucket in Redis says when the next request is admitted: 120/min = one per 0.5 s.
        settings.INGEST_RATE_PER_MINUTE = 120
        redis.Redis.from_url(url).delete(*keys)
        admitted, wait = 0, 0.0
        while not wait and admitted < 1000:
            wait = rate_limiter.hit(4242, 120)
            admitted += not wait
        assert admitted >= 120 and 0 < wait <= 0.5  # the burst of 120 (plus what refilled meanwhile)
        time.sleep(wait)
        assert rate_limiter.hit(4242, 120) == 0.0
    finally:
        redis.Redis.from_url(url).delete(*redis.Redis.from_url(url).keys("precursor:ingest-rate:*") or ["_"])
        rate_limiter._redis = limiter_client


def test_plain_dmesg_lines_use_the_boot_time_when_given_else_the_receive_time(client, clean_store, token):
    line = "[  100.500000] NVRM: Xid (PCI:0000:18:00): 48, pid=7, name=python3, DBE.\n"
    response = client.post(f"/api/ingest/kernel-log?host=gpu-a001&boot_ts={NOW}", data=line,
                           content_type="text/plain", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content
    before = int(time.time() * 1000)
    response = client.post("/api/ingest/kernel-log?host=gpu-a002", data=line, content_type="text/plain",
                           HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content
    rows = dict(store.query_rows(
        "SELECT host, (toUnixTimestamp64Milli(ts), attributes['time_source']) FROM events", tag="test"))
    assert rows["gpu-a001"] == (NOW + 100_500, "")
    assert rows["gpu-a002"][0] >= before - 1000 and rows["gpu-a002"][1] == "received"


def test_bad_query_parameters_are_named(client, clean_store, token):
    response = client.post("/api/ingest/kernel-log?year=last", data=XID, content_type="text/plain",
                           HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 400 and response.json()["field"] == "year"
    response = client.post("/api/ingest/prometheus?ts=yesterday", data=DCGM, content_type="text/plain",
                           HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 400 and response.json()["field"] == "ts"
    assert total_rows() == 0


def test_a_push_counts_as_arriving_at_the_group_commit_until_its_rows_are_queued(client, clean_store, token,
                                                                                 monkeypatch):
    seen = []
    submit = group_commit.GroupCommit.submit

    def spying(self, table, **kwargs):
        seen.append(self._batcher._arriving)  # still being handled: a leader would wait for it
        return submit(self, table, **kwargs)

    monkeypatch.setattr(group_commit.GroupCommit, "submit", spying)
    assert post(client, "prometheus", DCGM, token).status_code == 200
    assert post(client, "remote-write", rw(), token, content_type="application/x-protobuf",
                HTTP_CONTENT_ENCODING="snappy").status_code == 200
    assert seen == [1, 1]
    assert group_commit.committer("samples")._batcher._arriving == 0  # answered: no longer waited for
