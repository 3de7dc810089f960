"""Settings for GPU Portal, read from environment variables.

Every value has an embedded default so that `make demo` needs no configuration: SQLite, a
filesystem Celery broker that needs no server, and the kubeconfig kubesim writes. Production
sets DATABASE_URL (PostgreSQL), CELERY_BROKER_URL (Redis), SECRET_KEY, ALLOWED_HOSTS and
KUBECONFIG (or PORTAL_KUBE_IN_CLUSTER=true).
"""

import sys
from pathlib import Path

import environ
from celery.schedules import schedule as celery_schedule

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

env = environ.Env()
# Where the embedded defaults keep their files: SQLite, the filesystem broker, kubesim's state.
VAR_DIR = Path(env.str("PORTAL_VAR_DIR", default=str(VAR_DIR)))

DEBUG = env.bool("DEBUG", default=True)

# The development key is refused outside DEBUG, so a forgotten variable cannot reach production.
_DEV_SECRET_KEY = "django-insecure-gpu-portal-development-key-do-not-use-in-production"
SECRET_KEY = env.str("SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEBUG:
        sys.exit("SECRET_KEY must be set when DEBUG is off (refusing to start).")
    SECRET_KEY = _DEV_SECRET_KEY

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

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
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

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
DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("CONN_MAX_AGE", default=0))
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
            else "whitenoise.storage.CompressedManifestStaticFilesStorage"
        )
    },
}

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

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
}

SPECTACULAR_SETTINGS = {
    "TITLE": "GPU Portal API",
    "DESCRIPTION": "Projects, GPU quotas and training jobs on Kubernetes.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # One schema enum per choice set, whatever the field is called.
    "ENUM_NAME_OVERRIDES": {
        "RoleEnum": "tenants.models.Role",
        "GangBackendEnum": "tenants.models.GangBackend",
        "JobStateEnum": "jobs.states.JobState",
        "PriorityEnum": "quotas.models.PriorityName",
    },
}

REST_KNOX = {
    "TOKEN_TTL": None,
    "AUTO_REFRESH": False,
}

# Celery. The embedded default is a filesystem broker so the demo needs no broker server;
# production sets CELERY_BROKER_URL=redis://...
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="filesystem://")
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
CELERY_BEAT_SCHEDULE = {
    "resync-jobs-and-quotas": {
        "task": "jobs.tasks.resync_all",
        "schedule": celery_schedule(PORTAL_RESYNC_SECONDS),
        # A resync older than one period is superseded by the next one.
        "options": {"expires": PORTAL_RESYNC_SECONDS},
    },
}

# Kubernetes: a kubeconfig path (kubesim writes one for the demo) or the in-cluster config.
KUBECONFIG = env.str("KUBECONFIG", default=str(VAR_DIR / "kubesim" / "kubeconfig"))
PORTAL_KUBE_IN_CLUSTER = env.bool("PORTAL_KUBE_IN_CLUSTER", default=False)
# Client-side pacing of Kubernetes API calls, per worker process (token bucket; 0 = off).
PORTAL_KUBE_QPS = env.float("PORTAL_KUBE_QPS", default=20.0)
PORTAL_KUBE_BURST = env.int("PORTAL_KUBE_BURST", default=40)
# Live status (jobs/watcher): Redis for pub/sub of job changes (channel portal:jobs:<project>);
# empty = the CELERY_BROKER_URL when it is Redis, else no publishing (pages poll).
PORTAL_PUBSUB_URL = env.str(
    "PORTAL_PUBSUB_URL",
    default=CELERY_BROKER_URL if CELERY_BROKER_URL.startswith("redis") else "",
)
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

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
