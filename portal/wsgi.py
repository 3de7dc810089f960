import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
application = get_wsgi_application()

from portal.runtime import freeze_startup_heap  # noqa: E402 - after the application is loaded

freeze_startup_heap()
