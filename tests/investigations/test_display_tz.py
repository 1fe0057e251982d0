"""The display time zone: kept per account (the top bar's choice saves it; UTC by default), and
"this year" (times written without their year) judged in that zone, not in UTC."""
from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

from django.test import Client
from django.utils import timezone as dj_timezone

from investigations.models import Preference
from investigations.templatetags.precursor import when_short
from tests.telemetry.queries import event_row, write_rows

LA = ZoneInfo("America/Los_Angeles")


def zone_box(client) -> str:
    html = client.get("/events/").content.decode()
    return html.split('aria-label="Display time zone"')[0].rsplit('value="', 1)[1].split('"')[0]


def test_the_chosen_zone_is_saved_to_the_account_and_starts_the_next_session(client, investigator, clean_store):
    client.force_login(investigator)
    assert zone_box(client) == "UTC" and not Preference.objects.exists()  # default: UTC, nothing stored
    client.post("/account/tz", {"tz": "America/Los_Angeles", "next": "/events/"})
    assert Preference.objects.get(user=investigator).display_tz == "America/Los_Angeles"
    other = Client()  # another browser: a new session, the account's zone
    other.force_login(investigator)
    assert zone_box(other) == "America/Los_Angeles"
    other.post("/account/tz", {"tz": "Mars/Olympus_Mons", "next": "/events/"})  # refused: nothing changes
    assert Preference.objects.get(user=investigator).display_tz == "America/Los_Angeles"
    other.post("/account/tz", {"tz": "UTC", "next": "/events/"})
    assert Preference.objects.get(user=investigator).display_tz == "UTC"
    fresh = Client()
    fresh.force_login(investigator)
    assert zone_box(fresh) == "UTC"


def test_this_year_is_judged_in_the_display_zone():
    now = dj_timezone.now()
    # the last hour of this year in Los Angeles is already next year in UTC
    year_la = now.astimezone(LA).year
    late = datetime(year_la, 12, 31, 23, 30, tzinfo=LA).astimezone(timezone.utc)
    dj_timezone.activate(LA)
    try:
        assert when_short(late) == "12-31 23:30:00 PST"
    finally:
        dj_timezone.deactivate()
    if now.year == year_la:  # (not in the 8 hours when UTC has already turned the year)
        assert when_short(late) == f"{year_la + 1}-01-01 07:30:00 UTC"


def test_the_events_list_writes_the_year_by_the_display_zone(client, investigator, clean_store):
    # 07:00 UTC on 1 January of this year is the evening of 31 December of last year in Los Angeles
    now = dj_timezone.now()
    t = datetime(now.year, 1, 1, 7, 0, tzinfo=timezone.utc)
    write_rows("events", [event_row("c1", "gpu-a1", t, "xid", 79, component="gpu0", message="off the bus")])
    client.force_login(investigator)
    day = {"from": f"{now.year - 1}-12-31", "to": f"{now.year}-01-01"}
    assert "01-01 07:00:00 UTC" in client.get("/events/", day).content.decode()
    client.post("/account/tz", {"tz": "America/Los_Angeles", "next": "/events/"})
    assert f"{now.year - 1}-12-31 23:00:00 PST" in client.get("/events/", day).content.decode()
