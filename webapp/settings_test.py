"""Settings for the test suite: the normal settings, with a fresh data dir per run
unless PRECURSOR_DATA_DIR is set. Everything else still comes from the
environment (DATABASE_URL selects PostgreSQL)."""
import os
import tempfile

os.environ.setdefault("PRECURSOR_DATA_DIR", tempfile.mkdtemp(prefix="precursor-test-"))

from webapp.settings import *  # noqa: E402,F401,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast user fixtures

# Worker threads need their own connections to the test database: a file (with
# WAL, as in production) rather than SQLite's shared in-memory database.
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):  # noqa: F405
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / "test.sqlite3")}  # noqa: F405
