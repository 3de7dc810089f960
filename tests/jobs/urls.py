"""The portal's URLs plus the jobs pages, until portal/urls.py includes jobs.urls."""

from django.urls import include, path

from portal.urls import urlpatterns as portal_urlpatterns

urlpatterns = [*portal_urlpatterns]
if not any(getattr(p, "pattern", None) and str(p.pattern) == "jobs/" for p in urlpatterns):
    urlpatterns.append(path("jobs/", include("jobs.urls")))
