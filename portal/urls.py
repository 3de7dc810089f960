from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from jobs.console.views import ClusterView, OverviewView
from portal.api import load_api_modules, router
from portal.health import healthz, livez
from portal.observability import metrics_view
from tenants.api import MeView

# Each app's api.py registers its viewsets into the shared router; import them before routing.
load_api_modules()

urlpatterns = [
    path("", include("tenants.urls")),
    path("jobs/", include("jobs.urls")),
    path("cluster/", ClusterView.as_view(), name="cluster"),
    path("overview/", OverviewView.as_view(), name="overview"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/v1/me/", MeView.as_view(), name="api-me"),
    path("api/v1/", include(router.urls)),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path(
        "api/docs/",
        # Our template adds a link back to the portal above drf-spectacular's Swagger UI.
        SpectacularSwaggerView.as_view(url_name="api-schema", template_name="api_docs.html"),
        name="api-docs",
    ),
    path("healthz", healthz, name="healthz"),
    path("livez", livez, name="livez"),
    path("metrics", metrics_view, name="metrics"),
]

# /api/ answers its errors in the API's JSON shape, even those Django raises before a view.
handler400 = "portal.api_errors.handler400"
handler403 = "portal.api_errors.handler403"
handler404 = "portal.api_errors.handler404"
handler500 = "portal.api_errors.handler500"
