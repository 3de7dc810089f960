"""The ASGI entry point: the web server for every page, the API and the live event streams.

Production runs it under gunicorn with uvicorn workers (docker-compose.yml); the streams are
async views, so an open page costs an idle connection, not a thread.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
application = get_asgi_application()

from workspaces.proxy import WorkspaceProxy  # noqa: E402 - needs the settings loaded

# /ws/<id>/ (HTTP and WebSocket) goes to the workspaces' proxy, everything else to Django.
application = WorkspaceProxy(application)

from portal.runtime import freeze_startup_heap  # noqa: E402 - after the application is loaded

freeze_startup_heap()
