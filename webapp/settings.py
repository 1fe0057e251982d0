"""Precursor settings: every knob comes from the environment.

With nothing set, Precursor runs in its embedded mode: chDB telemetry store,
SQLite database and in-process Celery worker threads, all under
PRECURSOR_DATA_DIR (default ./var). Production sets TELEMETRY_DSN,
DATABASE_URL and REDIS_URL. A bad value stops start-up with a message naming
the variable (see ``webapp.env``).
"""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from webapp.env import ConfigError, envbool, envint, envlist, envstr, load_secret_key

BASE_DIR = Path(__file__).resolve().parent.parent

DATA_DIR = Path(envstr("PRECURSOR_DATA_DIR", str(BASE_DIR / "var"))).expanduser().resolve()
try:
    DATA_DIR.mkdir(parents=True, exist_ok=True)
except OSError as _exc:
    raise ConfigError("PRECURSOR_DATA_DIR", str(DATA_DIR), f"cannot be created: {_exc.strerror}") from None

DEBUG = envbool("DEBUG", False)

# The embedded mode keeps one generated key in the data dir so sessions survive restarts.
SECRET_KEY = load_secret_key(DATA_DIR, debug=DEBUG)

ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", [])

# --- telemetry store -------------------------------------------------------
TELEMETRY_DSN = envstr("TELEMETRY_DSN", f"chdb://{DATA_DIR / 'telemetry'}")
if not TELEMETRY_DSN.startswith(("chdb://", "http://", "https://", "clickhouse://")):
    raise ConfigError("TELEMETRY_DSN", TELEMETRY_DSN, "must start with chdb://, http:// or https://")
TELEMETRY_CLUSTER = envstr("TELEMETRY_CLUSTER", "")  # ClickHouse cluster name: Replicated + Distributed tables
TELEMETRY_TTL_DAYS = envint("TELEMETRY_TTL_DAYS", 400, minimum=0)  # 0 = keep forever
TELEMETRY_QUERY_TIMEOUT_S = envint("TELEMETRY_QUERY_TIMEOUT_S", 60, minimum=1)
# Threads of one process that may wait on a ClickHouse server at once (0 = no bound). `serve`
# sets it to its web threads minus two, so pages that need no telemetry never queue behind a hung store.
TELEMETRY_MAX_CONCURRENT_CALLS = envint("TELEMETRY_MAX_CONCURRENT_CALLS", 0, minimum=0)
TELEMETRY_DEFAULT_CLUSTER = envstr("PRECURSOR_CLUSTER", "default")  # fleet name used when a source names none

# --- Django database -------------------------------------------------------
_database_url = envstr("DATABASE_URL", "")
if _database_url:
    import dj_database_url

    try:
        _db = dj_database_url.parse(_database_url, conn_max_age=60, conn_health_checks=True)
    except Exception as exc:  # dj_database_url raises several types for unknown schemes
        raise ConfigError("DATABASE_URL", _database_url, f"cannot parse: {exc}") from None
else:
    _db = {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(DATA_DIR / "precursor.sqlite3"),
        # Web and worker threads write at once: WAL plus IMMEDIATE transactions and a busy
        # timeout mean writers queue instead of failing with "database is locked".
        "OPTIONS": {
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=30000;",
        },
    }
DATABASES = {"default": _db}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- background jobs -------------------------------------------------------
REDIS_URL = envstr("REDIS_URL", "")
if REDIS_URL and not REDIS_URL.startswith(("redis://", "rediss://", "unix://")):
    raise ConfigError("REDIS_URL", REDIS_URL, "must start with redis://, rediss:// or unix://")
# Without Redis the broker is in-memory: the worker threads live in the serving process.
CELERY_BROKER_URL = REDIS_URL or "memory://localhost/"
WORKER_THREADS = envint("PRECURSOR_WORKER_THREADS", 2, minimum=1, maximum=64)
# "serve" runs worker threads in-process unless told the workers run elsewhere (production).
EMBEDDED_WORKERS = envbool("PRECURSOR_EMBEDDED_WORKERS", not REDIS_URL)
CELERY_BEAT_SCHEDULE = {
    "recover-stale-jobs": {"task": "precursor.recover_stale_jobs", "schedule": 300.0, "options": {"expires": 280, "queue": "interactive"}},
}
JOB_SOFT_TIME_LIMIT_S = envint("PRECURSOR_JOB_SOFT_TIME_LIMIT_S", 3600, minimum=1)
JOB_TIME_LIMIT_S = envint("PRECURSOR_JOB_TIME_LIMIT_S", 3900, minimum=1)

# --- limits ----------------------------------------------------------------
INGEST_MAX_BODY_BYTES = envint("PRECURSOR_INGEST_MAX_BODY_BYTES", 64 * 1024 * 1024, minimum=1024)
# Requests per minute per ingest token. 30,000/min = 500 requests/s: at Prometheus' 2,000
# samples per remote-write request 1 M samples/s, at 500-sample scrapes 250,000 samples/s;
# one Prometheus for a 4,000-node fleet (600 k samples/s at 300 series / 2 s) needs ~18,000.
INGEST_RATE_PER_MINUTE = envint("PRECURSOR_INGEST_RATE_PER_MINUTE", 30_000, minimum=1)
# Seconds a process reuses an ingest token it found live (investigations.tokens): a revocation
# made in another process takes effect within this time (0: look it up on every push).
INGEST_TOKEN_CACHE_S = envint("PRECURSOR_INGEST_TOKEN_CACHE_S", 2, minimum=0, maximum=60)
DATA_UPLOAD_MAX_MEMORY_SIZE = INGEST_MAX_BODY_BYTES

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "ninja",  # serves Swagger UI for /api/docs from its own static files (no CDN)
    "axes",  # login throttling: lockout after repeated failures
    "webapp",
    "investigations",
]

MIDDLEWARE = [
    "webapp.middleware.ingest_arriving",  # first: a push's whole handling counts for the commit delay
    "django.middleware.security.SecurityMiddleware",
    "webapp.security.ContentSecurityPolicy",
    "whitenoise.middleware.WhiteNoiseMiddleware",  # /static/ (plotly.js included), before login checks
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "webapp.middleware.PrecursorLoginRequired",
    "django.contrib.messages.middleware.MessageMiddleware",
    "webapp.middleware.display_time_zone",  # the time zone pages show times in (session)
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "webapp.middleware.catalog_refresh",
    "axes.middleware.AxesMiddleware",  # last, as django-axes requires
]

# --- logins ----------------------------------------------------------------
# django-axes counts failed logins per (username, client address); at the limit that pair is
# locked out for the cool-off time, the right password included (HTTP 429 and a page saying so).
# Failures and lockouts are also written to the audit log (investigations/services/logins.py).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = envint("PRECURSOR_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=envint("PRECURSOR_LOGIN_LOCKOUT_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "webapp.security.locked_out"
AXES_VERBOSE = False
# Behind a proxy, the client address is the proxy's unless it is read from its header.
AXES_IPWARE_PROXY_COUNT = envint("PRECURSOR_PROXY_COUNT", 0, minimum=0) or None
AXES_IPWARE_META_PRECEDENCE_ORDER = ["HTTP_X_FORWARDED_FOR", "REMOTE_ADDR"] if AXES_IPWARE_PROXY_COUNT else ["REMOTE_ADDR"]

ROOT_URLCONF = "webapp.urls"
WSGI_APPLICATION = "webapp.wsgi.application"
LOGIN_URL = "login"  # URL names, resolved by Django (no hard-coded paths)
LOGIN_REDIRECT_URL = "inbox"
LOGOUT_REDIRECT_URL = "login"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "investigations.context_processors.roles",
            ],
        },
    },
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 8}},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = DATA_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "webapp" / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "webapp.staticfiles.PlotlyFinder",
]
# WhiteNoise serves STATIC_ROOT (filled by collectstatic, which `serve` and the compose init run),
# with the gzip copies collectstatic writes. Our own files revalidate hourly; plotly.js carries
# its version in its name and is cached for good.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_MAX_AGE = 3600
WHITENOISE_IMMUTABLE_FILE_TEST = r"/vendor/plotly-[^/]+\.min\.js$"

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"

# Served behind TLS (a proxy terminating HTTPS): one variable turns on HSTS, the redirect to
# https and Secure cookies. The proxy must set X-Forwarded-Proto: https.
HTTPS = envbool("PRECURSOR_HTTPS", False)
if HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]  # load balancers probe over plain HTTP
    SECURE_HSTS_SECONDS = envint("PRECURSOR_HSTS_SECONDS", 31_536_000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("PRECURSOR_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = envbool("PRECURSOR_HSTS_PRELOAD", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True

LOG_LEVEL = envstr("LOG_LEVEL", "INFO").upper()
if LOG_LEVEL not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
    raise ConfigError("LOG_LEVEL", LOG_LEVEL, "must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {"celery": {"level": "WARNING"}, "waitress": {"level": "WARNING"}, "axes": {"level": "WARNING"}},
}
