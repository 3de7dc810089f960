# One image for every process of the portal: web (ASGI), Celery worker, Celery beat, the cluster
# watcher and the migrate Job (see deploy/ and docker-compose.yml). tests/test_image.py replays it
# without Docker: the copy (by .dockerignore), the install and every process's start.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /app
RUN useradd --create-home --uid 10001 portal

# The whole source tree minus what .dockerignore leaves out (kubesim, the CLI, tests, docs):
# every app of the portal, its templates and static files, manage.py.
COPY . .
# The portal alone: not editable, no extra, so neither kubesim nor its dependencies are installed.
RUN pip install .

# collectstatic needs settings that import cleanly; the real key comes from the environment.
RUN DEBUG=false SECRET_KEY=collectstatic-only STATIC_ROOT=/app/staticfiles \
    python manage.py collectstatic --noinput

# A production image: settings refuse to start with DEBUG on (see portal/settings.py).
ENV STATIC_ROOT=/app/staticfiles \
    PORTAL_ENV=production
USER 10001
EXPOSE 8000
CMD ["gunicorn", "portal.asgi:application", "--worker-class", "uvicorn_worker.UvicornWorker", "--bind", "0.0.0.0:8000", "--workers", "3", "--access-logfile", "-"]
