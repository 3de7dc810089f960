# One image for the web process, the Celery worker and Celery beat (see docker-compose.yml).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /app
RUN useradd --create-home --uid 10001 portal

COPY pyproject.toml README.md ./
COPY portal ./portal
COPY tenants ./tenants
COPY quotas ./quotas
COPY jobs ./jobs
# The portal alone: no kubesim (the simulated cluster of tests and the demo) and no extra, so
# none of kubesim's dependencies (the `sim` extra) is installed.
RUN pip install .

COPY manage.py ./
COPY templates ./templates
COPY static ./static
# collectstatic needs settings that import cleanly; the real key comes from the environment.
RUN DEBUG=false SECRET_KEY=collectstatic-only STATIC_ROOT=/app/staticfiles \
    python manage.py collectstatic --noinput

# A production image: settings refuse to start with DEBUG on (see portal/settings.py).
ENV STATIC_ROOT=/app/staticfiles \
    PORTAL_ENV=production
USER portal
EXPOSE 8000
CMD ["gunicorn", "portal.asgi:application", "--worker-class", "uvicorn_worker.UvicornWorker", "--bind", "0.0.0.0:8000", "--workers", "3", "--access-logfile", "-"]
