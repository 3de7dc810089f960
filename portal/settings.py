"""Settings for GPU Portal, read from environment variables.

Every value has an embedded default so that `make demo` needs no configuration: SQLite, a
filesystem Celery broker that needs no server, and the kubeconfig kubesim writes. Production
sets DATABASE_URL (PostgreSQL), CELERY_BROKER_URL (Redis), SECRET_KEY, ALLOWED_HOSTS and
KUBECONFIG (or PORTAL_KUBE_IN_CLUSTER=true).
"""

import sys
from datetime import timedelta
from pathlib import Path

import environ
from celery.schedules import schedule as celery_schedule

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

env = environ.Env()
# Where the embedded defaults keep their files: SQLite, the filesystem broker, kubesim's state.
VAR_DIR = Path(env.str("PORTAL_VAR_DIR", default=str(VAR_DIR)))

# PORTAL_ENV=production (set by the Dockerfile and docker-compose.yml) makes DEBUG default to off
# and refuses to start with DEBUG on: the debug pages show settings, SQL and tracebacks.
PORTAL_ENV = env.str("PORTAL_ENV", default="development")
if PORTAL_ENV not in ("development", "production"):
    sys.exit(f"PORTAL_ENV must be 'development' or 'production', not {PORTAL_ENV!r}.")
DEBUG = env.bool("DEBUG", default=PORTAL_ENV != "production")
if DEBUG and PORTAL_ENV == "production":
    sys.exit("DEBUG is on but PORTAL_ENV=production: refusing to start (set DEBUG=false).")

# The development key is refused outside DEBUG, so a forgotten variable cannot reach production.
_DEV_SECRET_KEY = "django-insecure-gpu-portal-development-key-do-not-use-in-production"  # noqa: S105
SECRET_KEY = env.str("SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEBUG:
        sys.exit("SECRET_KEY must be set when DEBUG is off (refusing to start).")
    SECRET_KEY = _DEV_SECRET_KEY

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

# The job list's indexes carry non-key columns (INCLUDE) for PostgreSQL's index-only scans;
# SQLite (the embedded demo) builds them without those columns, which is all it needs.
SILENCED_SYSTEM_CHECKS = ["models.W040"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "knox",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "portal",
    "tenants",
    "quotas",
    "jobs",
    "gpumetrics",  # GPU metrics per job
    "volumes",  # data volumes, checkpoints
    "credentials",  # secrets and registry logins of projects
    "audit",  # audit trail: who did what
    "notifications",  # e-mail and webhook notifications per user
    "governance",  # per-member GPU limits, temporary quota requests
    "planner",  # start-time forecast, pending advice, right-sizing, quota what-if
    "workspaces",  # interactive JupyterLab / code-server sessions behind the portal's proxy
]

MIDDLEWARE = [
    # Outermost: every log line of a request carries its id (X-Request-ID, echoed back).
    "portal.logs.RequestIdMiddleware",
    # A view that meets a database or Redis outage answers 503 + Retry-After, not 500.
    "portal.outage.OutageMiddleware",
    # Kubelet probes and Prometheus scrapes, before the host check and the HTTPS redirect.
    "portal.health.ProbeEndpointsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Source (web/api/cli/admin/sso), request id and address of the audit rows written inside.
    "audit.middleware.AuditContextMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"
ASGI_APPLICATION = "portal.asgi.application"

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

DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'portal.sqlite3'}"),
}
# Persistent connections: opening one costs PostgreSQL a backend fork and TLS/auth (14-16 ms
# here, more than a whole job list page). Health checks drop a connection the server closed
# instead of failing the next request. CONN_MAX_AGE=0 turns it off (e.g. behind PgBouncer in
# transaction mode, see docs/operations/scaling.md).
DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("CONN_MAX_AGE", default=60))
DATABASES["default"].setdefault("CONN_HEALTH_CHECKS", env.bool("CONN_HEALTH_CHECKS", default=True))
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # The demo's web, worker and watcher write one SQLite file at once: WAL lets readers run
    # beside a writer, IMMEDIATE takes the write lock at BEGIN (a deferred transaction that
    # upgrades fails at once with "database is locked"), and a writer waits up to 30 s for it.
    _sqlite = DATABASES["default"].setdefault("OPTIONS", {})
    _sqlite.setdefault("transaction_mode", "IMMEDIATE")
    _sqlite.setdefault("timeout", 30)
    _sqlite.setdefault("init_command", "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;")
# PostgreSQL connection pool per process (psycopg_pool), e.g. 20 for an ASGI web process: each
# request then borrows a connection instead of opening one, so a burst of page loads or live
# streams reconnecting cannot exceed the server's max_connections. 0 = no pool.
DATABASE_POOL_MAX_SIZE = env.int("DATABASE_POOL_MAX_SIZE", default=0)
if DATABASE_POOL_MAX_SIZE and DATABASES["default"]["ENGINE"].endswith("postgresql"):
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # Django refuses persistent connections with a pool
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1,
        "max_size": DATABASE_POOL_MAX_SIZE,
        "timeout": 30,
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = env.path("STATIC_ROOT", default=VAR_DIR / "staticfiles")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "portal.storage.ForgivingManifestStaticFilesStorage"
        )
    },
}

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

# Single sign-on with OpenID Connect (tenants/sso/): on when an issuer and a client are set. The
# local login form stays beside it (break-glass staff accounts, the demo).
PORTAL_OIDC_ISSUER = env.str("PORTAL_OIDC_ISSUER", default="").rstrip("/")
# Where the provider's metadata is; <issuer>/.well-known/openid-configuration unless set.
PORTAL_OIDC_DISCOVERY_URL = env.str("PORTAL_OIDC_DISCOVERY_URL", default="")
PORTAL_OIDC_CLIENT_ID = env.str("PORTAL_OIDC_CLIENT_ID", default="")
PORTAL_OIDC_CLIENT_SECRET = env.str("PORTAL_OIDC_CLIENT_SECRET", default="")
PORTAL_OIDC_SCOPES = env.list(
    "PORTAL_OIDC_SCOPES", default=["openid", "email", "profile", "groups"]
)
# The ID token claim that lists the user's groups (Keycloak and most IdPs: "groups").
PORTAL_OIDC_GROUPS_CLAIM = env.str("PORTAL_OIDC_GROUPS_CLAIM", default="groups")
# Clock skew tolerated on the ID token's exp, iat and nbf.
PORTAL_OIDC_LEEWAY_SECONDS = env.int("PORTAL_OIDC_LEEWAY_SECONDS", default=60)
PORTAL_OIDC_TIMEOUT_SECONDS = env.float("PORTAL_OIDC_TIMEOUT_SECONDS", default=10.0)
PORTAL_OIDC_BUTTON_LABEL = env.str("PORTAL_OIDC_BUTTON_LABEL", default="Log in with single sign-on")
if bool(PORTAL_OIDC_ISSUER) != bool(PORTAL_OIDC_CLIENT_ID):
    sys.exit("PORTAL_OIDC_ISSUER and PORTAL_OIDC_CLIENT_ID are set together (single sign-on).")

# Security: strict when DEBUG is off (manage.py check --deploy is clean then).
SESSION_COOKIE_SECURE = not DEBUG
CSRF_COOKIE_SECURE = not DEBUG
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=not DEBUG)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_HSTS_PRELOAD = not DEBUG
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "knox.auth.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "portal.api_errors.PortalAutoSchema",
    "EXCEPTION_HANDLER": "portal.api_errors.exception_handler",
    "DEFAULT_THROTTLE_CLASSES": [
        "portal.throttling.TokenRateThrottle",
        "portal.throttling.UserRateThrottle",
        "portal.throttling.AnonRateThrottle",
    ],
    # Bodies are checked for text PostgreSQL cannot store and for absurd nesting (400, not 500).
    "DEFAULT_PARSER_CLASSES": [
        "portal.api_io.PortalJSONParser",
        "portal.api_io.PortalFormParser",
        "portal.api_io.PortalMultiPartParser",
    ],
    "DEFAULT_RENDERER_CLASSES": [
        "portal.api_io.PortalJSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
}

SPECTACULAR_SETTINGS = {
    "TITLE": "GPU Portal API",
    "DESCRIPTION": "Projects, GPU quotas and training jobs on Kubernetes.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "portal.api_errors.document_empty_filters",
    ],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # One schema enum per choice set, whatever the field is called.
    "ENUM_NAME_OVERRIDES": {
        "RoleEnum": "tenants.models.Role",
        "GangBackendEnum": "tenants.models.GangBackend",
        "SchedulerEnum": "quotas.models.PoolScheduler",
        "JobStateEnum": "jobs.states.JobState",
        "PriorityEnum": "quotas.models.PriorityName",
        "JobKindEnum": "jobs.models.JobKind",
        "VolumeKindEnum": "volumes.models.VolumeKind",
        "CredentialKindEnum": "credentials.models.CredentialKind",
    },
}

# Personal API tokens expire after this many days unless their creator picks another lifetime
# (0 = never, which only this setting can choose).
PORTAL_TOKEN_TTL_DAYS = env.int("PORTAL_TOKEN_TTL_DAYS", default=90)
if PORTAL_TOKEN_TTL_DAYS < 0:
    sys.exit("PORTAL_TOKEN_TTL_DAYS must be 0 (never expire) or a number of days.")
REST_KNOX = {
    "TOKEN_TTL": timedelta(days=PORTAL_TOKEN_TTL_DAYS) if PORTAL_TOKEN_TTL_DAYS else None,
    "AUTO_REFRESH": False,
}

# Pod Security level of new projects' namespaces: "restricted" (pods run as the project's own
# non-root uid, no privilege escalation, all capabilities dropped) or "baseline" (images may run
# as root). Each project can be switched in the admin; existing projects keep theirs.
PORTAL_DEFAULT_POD_SECURITY = env.str("PORTAL_DEFAULT_POD_SECURITY", default="restricted")
if PORTAL_DEFAULT_POD_SECURITY not in ("restricted", "baseline"):
    sys.exit(
        "PORTAL_DEFAULT_POD_SECURITY must be 'restricted' or 'baseline', "
        f"not {PORTAL_DEFAULT_POD_SECURITY!r}."
    )

# Celery. The embedded default is a filesystem broker so the demo needs no broker server;
# production sets CELERY_BROKER_URL=redis://...
# (localhost named: kombu warns on every connection of a URL without a host)
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="filesystem://localhost/")
_broker_dir = VAR_DIR / "broker"
CELERY_BROKER_TRANSPORT_OPTIONS = (
    {
        "data_folder_in": str(_broker_dir),
        "data_folder_out": str(_broker_dir),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
    if CELERY_BROKER_URL.startswith("filesystem")
    else {"visibility_timeout": 3600}
)
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = 120
CELERY_TASK_TIME_LIMIT = 180
CELERY_TIMEZONE = "UTC"
# Periodic resync of every live job and every quota object (seconds). A lost Celery message
# delays a job by at most this long.
PORTAL_RESYNC_SECONDS = env.float("PORTAL_RESYNC_SECONDS", default=60.0)
# A finished (succeeded/failed) job's cluster objects are deleted by the resync this long after
# it finished, once its status and last log lines are recorded; cancelled jobs' at once.
PORTAL_JOB_RETENTION_SECONDS = env.float("PORTAL_JOB_RETENTION_SECONDS", default=86400.0)
# How long a reconcile waits for another worker holding the same job before retrying later.
PORTAL_JOB_LOCK_WAIT_SECONDS = env.float("PORTAL_JOB_LOCK_WAIT_SECONDS", default=15.0)
CELERY_BEAT_SCHEDULE = {
    "resync-jobs-and-quotas": {
        "task": "jobs.tasks.resync_all",
        "schedule": celery_schedule(PORTAL_RESYNC_SECONDS),
        # A resync older than one period is superseded by the next one.
        "options": {"expires": PORTAL_RESYNC_SECONDS},
    },
}
# Temporary quota requests (governance): the furthest end date a project admin may ask for, in
# days from today; ended requests give their GPUs back at every resync period.
PORTAL_QUOTA_REQUEST_MAX_DAYS = env.int("PORTAL_QUOTA_REQUEST_MAX_DAYS", default=90)
CELERY_BEAT_SCHEDULE["end-quota-requests"] = {
    "task": "governance.tasks.end_quota_requests",
    "schedule": celery_schedule(PORTAL_RESYNC_SECONDS),
    "options": {"expires": PORTAL_RESYNC_SECONDS},
}
# The small tables the lists join are analysed when they change, even where autovacuum is off.
PORTAL_ANALYZE_SECONDS = env.float("PORTAL_ANALYZE_SECONDS", default=300.0)
CELERY_BEAT_SCHEDULE["analyze-small-tables"] = {
    "task": "portal.tasks.analyze_small_tables",
    "schedule": celery_schedule(PORTAL_ANALYZE_SECONDS),
    "options": {"expires": PORTAL_ANALYZE_SECONDS},
}

# Audit trail: rows older than this many days are deleted once a day (0 = keep forever).
PORTAL_AUDIT_RETENTION_DAYS = env.int("PORTAL_AUDIT_RETENTION_DAYS", default=400)
if PORTAL_AUDIT_RETENTION_DAYS < 0:
    sys.exit("PORTAL_AUDIT_RETENTION_DAYS must be 0 (keep forever) or a number of days.")
CELERY_BEAT_SCHEDULE["audit-retention"] = {
    "task": "audit.tasks.purge_expired_events",
    "schedule": celery_schedule(86400.0),
    "options": {"expires": 3600.0},
}

# Quota sync safety: a sync that would delete more than this many owned quota objects AND more
# than this share of them deletes nothing and tells staff (admin: Quota sync status). A second
# sync waits this long for the one running before it gives up and retries.
PORTAL_QUOTA_SYNC_MAX_DELETE_COUNT = env.int("PORTAL_QUOTA_SYNC_MAX_DELETE_COUNT", default=3)
PORTAL_QUOTA_SYNC_MAX_DELETE_FRACTION = env.float(
    "PORTAL_QUOTA_SYNC_MAX_DELETE_FRACTION", default=0.25
)
PORTAL_QUOTA_SYNC_LOCK_WAIT = env.float("PORTAL_QUOTA_SYNC_LOCK_WAIT", default=60.0)
# What the quota sync writes into every project namespace besides quota objects:
# - a NetworkPolicy admitting traffic from the namespace itself, from the portal's namespace and
#   from non-tenant namespaces, never from another tenant's (effective where the CNI enforces it);
# - with PORTAL_TENANT_ROLE (deploy/ sets gpu-portal-tenant), a RoleBinding of that ClusterRole to
#   the portal's service account, so its writes (jobs, Secrets, claims) reach tenant namespaces
#   only. Empty binds nothing: the portal's identity holds those rights already (a kubeconfig).
PORTAL_TENANT_NETWORK_POLICY = env.bool("PORTAL_TENANT_NETWORK_POLICY", default=True)
PORTAL_NAMESPACE = env.str("PORTAL_NAMESPACE", default="gpu-portal")
PORTAL_SERVICE_ACCOUNT = env.str("PORTAL_SERVICE_ACCOUNT", default="gpu-portal")
PORTAL_TENANT_ROLE = env.str("PORTAL_TENANT_ROLE", default="")

# Kubernetes: a kubeconfig path (kubesim writes one for the demo) or the in-cluster config.
KUBECONFIG = env.str("KUBECONFIG", default=str(VAR_DIR / "kubesim" / "kubeconfig"))
PORTAL_KUBE_IN_CLUSTER = env.bool("PORTAL_KUBE_IN_CLUSTER", default=False)
# In-cluster mode reads the pod's service account token and CA from these files and reaches the
# API server at KUBERNETES_SERVICE_HOST/PORT; set them to run the same path outside a pod.
PORTAL_KUBE_TOKEN_FILE = env.str("PORTAL_KUBE_TOKEN_FILE", default="")
PORTAL_KUBE_CA_FILE = env.str("PORTAL_KUBE_CA_FILE", default="")
PORTAL_KUBE_HOST = env.str("PORTAL_KUBE_HOST", default="")
# Client-side pacing of Kubernetes API calls, per worker process (token bucket; 0 = off).
PORTAL_KUBE_QPS = env.float("PORTAL_KUBE_QPS", default=20.0)
PORTAL_KUBE_BURST = env.int("PORTAL_KUBE_BURST", default=40)
# Server-side applies in flight per job-array pass (jobs.arrays.reconcile), still paced by QPS.
PORTAL_ARRAY_APPLY_CONCURRENCY = env.int("PORTAL_ARRAY_APPLY_CONCURRENCY", default=8)
# Items per LIST page (limit/continue): the resync and sweep stream lists in pages of this size.
PORTAL_KUBE_LIST_PAGE_SIZE = env.int("PORTAL_KUBE_LIST_PAGE_SIZE", default=500)
# The start-time forecast's late end expects, in every window of this many minutes, as many
# higher-priority submissions as came in the last one (0: it expects none).
PORTAL_FORECAST_ARRIVAL_WINDOW_MINUTES = env.float(
    "PORTAL_FORECAST_ARRIVAL_WINDOW_MINUTES", default=60.0
)
# Lists (jobs) count exactly up to this many rows; above it they show the planner's estimate.
PORTAL_EXACT_COUNT_CAP = env.int("PORTAL_EXACT_COUNT_CAP", default=1_000)
# Live status (jobs/watcher): Redis for pub/sub of job changes (channel portal:jobs:<project>);
# empty = the CELERY_BROKER_URL when it is Redis, else no publishing (pages poll).
PORTAL_PUBSUB_URL = env.str(
    "PORTAL_PUBSUB_URL",
    default=CELERY_BROKER_URL if CELERY_BROKER_URL.startswith("redis") else "",
)
# The shared cache (API rate-limit counters): Redis, so every web process counts the same
# requests; empty = the CELERY_BROKER_URL when it is Redis, else a per-process memory cache (the
# demo: one process).
PORTAL_CACHE_URL = env.str(
    "PORTAL_CACHE_URL",
    default=CELERY_BROKER_URL if CELERY_BROKER_URL.startswith("redis") else "",
)
CACHES = {
    "default": (
        {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": PORTAL_CACHE_URL,
            "KEY_PREFIX": "gpu-portal",
            # A cache that does not answer must not hang the request (portal/throttling.py then
            # lets it through).
            "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
        }
        if PORTAL_CACHE_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}
# API rate limits (portal/throttling.py), DRF's syntax: N/s, N/min, N/hour or N/day; "off" = no
# limit. Per token (each personal token), per user (all their tokens and their session together)
# and per client IP address for requests without a login. Read at every request.
PORTAL_API_RATE_TOKEN = env.str("PORTAL_API_RATE_TOKEN", default="600/min")
PORTAL_API_RATE_USER = env.str("PORTAL_API_RATE_USER", default="1200/min")
PORTAL_API_RATE_ANON = env.str("PORTAL_API_RATE_ANON", default="60/min")
# /metrics (Prometheus): with a token, scrapers send "Authorization: Bearer <token>"; without,
# only loopback callers and staff sessions may read it.
PORTAL_METRICS_TOKEN = env.str("PORTAL_METRICS_TOKEN", default="")
# The Celery worker touches this file while its consumer runs (the Kubernetes liveness probe reads
# it: `python -m portal.probes fresh 60 FILE`); empty = no file.
PORTAL_WORKER_HEARTBEAT_FILE = env.str("PORTAL_WORKER_HEARTBEAT_FILE", default="")
# The watcher's leader-election Lease (coordination.k8s.io/v1) and its timings (seconds).
PORTAL_WATCHER_LEASE_NAMESPACE = env.str("PORTAL_WATCHER_LEASE_NAMESPACE", default="kube-system")
PORTAL_WATCHER_LEASE_NAME = env.str("PORTAL_WATCHER_LEASE_NAME", default="gpu-portal-watcher")
# A standby takes over at most lease + 2 × renew after the leader's last renewal (≤ 12 s).
PORTAL_WATCHER_LEASE_SECONDS = env.float("PORTAL_WATCHER_LEASE_SECONDS", default=8.0)
PORTAL_WATCHER_RENEW_SECONDS = env.float("PORTAL_WATCHER_RENEW_SECONDS", default=2.0)
# The watcher's own API pacing (it lists and reads more than a worker; 0 = off).
PORTAL_WATCHER_KUBE_QPS = env.float("PORTAL_WATCHER_KUBE_QPS", default=100.0)
# Database writers for state changes (each its own connection); 1 = write in the loop thread.
PORTAL_WATCHER_WRITERS = env.int("PORTAL_WATCHER_WRITERS", default=4)
# runtimeClassName for GPU pods (e.g. "nvidia" where the NVIDIA runtime is not the default).
PORTAL_RUNTIME_CLASS = env.str("PORTAL_RUNTIME_CLASS", default="")

# --- GPU metrics (gpumetrics app) ---------------------------------------------------------------
# Source: "dcgm" scrapes every dcgm-exporter pod (found by namespace + label selector) through
# the API server's pod proxy ("proxy", outside the cluster) or by pod IP ("direct", the default
# with PORTAL_KUBE_IN_CLUSTER); "prometheus" reads the same series from
# PORTAL_METRICS_PROMETHEUS_URL.
PORTAL_METRICS_SOURCE = env.str("PORTAL_METRICS_SOURCE", default="dcgm")
PORTAL_METRICS_PROMETHEUS_URL = env.str("PORTAL_METRICS_PROMETHEUS_URL", default="")
PORTAL_METRICS_PERIOD_SECONDS = env.float("PORTAL_METRICS_PERIOD_SECONDS", default=15.0)
PORTAL_METRICS_NAMESPACE = env.str("PORTAL_METRICS_NAMESPACE", default="gpu-operator")
PORTAL_METRICS_LABEL_SELECTOR = env.str(
    "PORTAL_METRICS_LABEL_SELECTOR", default="app=nvidia-dcgm-exporter"
)
PORTAL_METRICS_PORT = env.int("PORTAL_METRICS_PORT", default=9400)
PORTAL_METRICS_PATH = env.str("PORTAL_METRICS_PATH", default="/metrics")
PORTAL_METRICS_ACCESS = env.str("PORTAL_METRICS_ACCESS", default="")  # proxy | direct
PORTAL_METRICS_CONCURRENCY = env.int("PORTAL_METRICS_CONCURRENCY", default=16)
PORTAL_METRICS_TIMEOUT_SECONDS = env.float("PORTAL_METRICS_TIMEOUT_SECONDS", default=5.0)
PORTAL_METRICS_IDLE_THRESHOLD = env.float("PORTAL_METRICS_IDLE_THRESHOLD", default=10.0)
PORTAL_METRICS_IDLE_WARN_MINUTES = env.float("PORTAL_METRICS_IDLE_WARN_MINUTES", default=30.0)
# A job is judged idle or busy only on samples spanning this long (5 sweeps at least).
PORTAL_METRICS_IDLE_MIN_MINUTES = env.float("PORTAL_METRICS_IDLE_MIN_MINUTES", default=5.0)
PORTAL_METRICS_RETENTION_RAW_DAYS = env.float("PORTAL_METRICS_RETENTION_RAW_DAYS", default=7)
PORTAL_METRICS_RETENTION_MINUTE_DAYS = env.float("PORTAL_METRICS_RETENTION_MINUTE_DAYS", default=90)
PORTAL_METRICS_RETENTION_HOUR_DAYS = env.float("PORTAL_METRICS_RETENTION_HOUR_DAYS", default=0)
PORTAL_METRICS_MAINTAIN_SECONDS = env.float("PORTAL_METRICS_MAINTAIN_SECONDS", default=300.0)
if env.bool("PORTAL_METRICS_ENABLED", default=True):
    CELERY_BEAT_SCHEDULE["gpu-metrics-collect"] = {
        "task": "gpumetrics.tasks.collect",
        "schedule": celery_schedule(PORTAL_METRICS_PERIOD_SECONDS),
        "options": {"expires": PORTAL_METRICS_PERIOD_SECONDS},
    }
    CELERY_BEAT_SCHEDULE["gpu-metrics-maintain"] = {
        "task": "gpumetrics.tasks.maintain",
        "schedule": celery_schedule(PORTAL_METRICS_MAINTAIN_SECONDS),
        "options": {"expires": PORTAL_METRICS_MAINTAIN_SECONDS},
    }
# --- end GPU metrics ----------------------------------------------------------------------------

# --- Workspaces (workspaces app) ---------------------------------------------------------------
# How the proxy reaches a workspace's Service: auto, api-server or direct
# (portal/kube/service_proxy.py).
PORTAL_WORKSPACE_ROUTE = env.str("PORTAL_WORKSPACE_ROUTE", default="auto")
# Running or queued workspaces one person may have at once.
PORTAL_WORKSPACES_PER_USER = env.int("PORTAL_WORKSPACES_PER_USER", default=2)
# Browser activity through the proxy is written at most this often per workspace.
PORTAL_WORKSPACE_TOUCH_SECONDS = env.float("PORTAL_WORKSPACE_TOUCH_SECONDS", default=30.0)
# How often idle workspaces are looked for (and their Services checked).
PORTAL_WORKSPACE_CULL_SECONDS = env.float("PORTAL_WORKSPACE_CULL_SECONDS", default=60.0)
CELERY_BEAT_SCHEDULE["workspaces-cull"] = {
    "task": "workspaces.tasks.cull",
    "schedule": celery_schedule(PORTAL_WORKSPACE_CULL_SECONDS),
    "options": {"expires": PORTAL_WORKSPACE_CULL_SECONDS},
}
# --- end workspaces -----------------------------------------------------------------------------

# --- Notifications (notifications app) ---------------------------------------------------------
# E-mail goes through Django's mail with these SMTP settings. Without EMAIL_HOST the messages are
# printed to the worker's log (the demo) unless EMAIL_BACKEND says otherwise.
EMAIL_HOST = env.str("EMAIL_HOST", default="")
EMAIL_PORT = env.int("EMAIL_PORT", default=25)
EMAIL_HOST_USER = env.str("EMAIL_HOST_USER", default="")
EMAIL_HOST_PASSWORD = env.str("EMAIL_HOST_PASSWORD", default="")
EMAIL_USE_TLS = env.bool("EMAIL_USE_TLS", default=False)  # STARTTLS, usually port 587
EMAIL_USE_SSL = env.bool("EMAIL_USE_SSL", default=False)  # implicit TLS, usually port 465
if EMAIL_USE_TLS and EMAIL_USE_SSL:
    sys.exit("EMAIL_USE_TLS and EMAIL_USE_SSL are exclusive: set one of them.")
EMAIL_TIMEOUT = env.float("EMAIL_TIMEOUT", default=10.0)
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="GPU Portal <gpu-portal@localhost>")
EMAIL_BACKEND = env.str(
    "EMAIL_BACKEND",
    default="django.core.mail.backends.smtp.EmailBackend"
    if EMAIL_HOST
    else "django.core.mail.backends.console.EmailBackend",
)
EMAIL_HOST = EMAIL_HOST or "localhost"
# The portal's public address, for links in messages (e.g. https://gpu.example.org); empty: none.
PORTAL_BASE_URL = env.str("PORTAL_BASE_URL", default="")
# A webhook POST gives up after this many seconds (connect, and again for the answer).
PORTAL_NOTIFY_WEBHOOK_TIMEOUT_SECONDS = env.float(
    "PORTAL_NOTIFY_WEBHOOK_TIMEOUT_SECONDS", default=5.0
)
# Tries per message (e-mail or webhook) and the first retry's delay; each retry waits twice as
# long as the one before (30 s, 1 min, 2 min, ...; at most an hour).
PORTAL_NOTIFY_MAX_ATTEMPTS = env.int("PORTAL_NOTIFY_MAX_ATTEMPTS", default=6)
PORTAL_NOTIFY_RETRY_BASE_SECONDS = env.float("PORTAL_NOTIFY_RETRY_BASE_SECONDS", default=30.0)
# No storm: after this many messages to one user within the window, what follows in the window is
# gathered into one digest message per channel, sent when the window ends.
PORTAL_NOTIFY_DIGEST_THRESHOLD = env.int("PORTAL_NOTIFY_DIGEST_THRESHOLD", default=5)
PORTAL_NOTIFY_DIGEST_WINDOW_SECONDS = env.float("PORTAL_NOTIFY_DIGEST_WINDOW_SECONDS", default=60.0)
# A queued job is worth a message after waiting this many minutes (each user can pick another).
PORTAL_NOTIFY_WAITING_MINUTES = env.int("PORTAL_NOTIFY_WAITING_MINUTES", default=30)
# Celery queue of the notification tasks; empty = the default queue. With a queue of their own
# (e.g. "notifications"), run a worker for it: `celery -A portal worker -Q notifications`.
PORTAL_NOTIFY_QUEUE = env.str("PORTAL_NOTIFY_QUEUE", default="")
# How often the sweep looks for waiting jobs and for messages a lost task left unsent.
PORTAL_NOTIFY_SWEEP_SECONDS = env.float("PORTAL_NOTIFY_SWEEP_SECONDS", default=60.0)
CELERY_BEAT_SCHEDULE["notifications-sweep"] = {
    "task": "notifications.tasks.sweep",
    "schedule": celery_schedule(PORTAL_NOTIFY_SWEEP_SECONDS),
    "options": {"expires": PORTAL_NOTIFY_SWEEP_SECONDS},
}
if PORTAL_NOTIFY_QUEUE:
    CELERY_TASK_ROUTES = {"notifications.tasks.*": {"queue": PORTAL_NOTIFY_QUEUE}}
# --- end notifications --------------------------------------------------------------------------

# Outages (portal/outage.py): while PostgreSQL or Redis cannot be reached, requests answer 503
# with this Retry-After (seconds).
PORTAL_OUTAGE_RETRY_AFTER_SECONDS = env.int("PORTAL_OUTAGE_RETRY_AFTER_SECONDS", default=5)
# Idempotency-Key of job submissions (jobs/idempotency.py): a repeat within this many hours
# returns the first submission's job instead of a second one; older keys are forgotten.
PORTAL_IDEMPOTENCY_KEY_HOURS = env.float("PORTAL_IDEMPOTENCY_KEY_HOURS", default=24.0)
if PORTAL_IDEMPOTENCY_KEY_HOURS <= 0:
    sys.exit("PORTAL_IDEMPOTENCY_KEY_HOURS must be a positive number of hours.")

# Logs: "text" (the message only) or "json" (one object per line: time, level, logger, message,
# request_id, job_id; portal/logs.py). Celery workers use the same configuration with json.
PORTAL_LOG_FORMAT = env.str("PORTAL_LOG_FORMAT", default="text")
if PORTAL_LOG_FORMAT not in ("text", "json"):
    sys.exit(f"PORTAL_LOG_FORMAT must be 'text' or 'json', not {PORTAL_LOG_FORMAT!r}.")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "portal.logs.ContextFilter"}},
    "formatters": {
        "text": {"format": "%(message)s"},
        "json": {"()": "portal.logs.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "filters": ["context"],
            "formatter": PORTAL_LOG_FORMAT,
        }
    },
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
