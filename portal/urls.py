from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from jobs.console.views import ClusterView, OverviewView
from portal.api import load_api_modules, router
from portal.health import healthz, livez
from portal.observability import metrics_view
from tenants.api import MeView
from tenants.sso import views as sso_views

# Each app's api.py registers its viewsets into the shared router; import them before routing.
load_api_modules()

urlpatterns = [
    path("", include("tenants.urls")),
    path("jobs/", include("jobs.urls")),
    path("", include("governance.urls")),
    path("planner/", include("planner.urls")),
    path("workspaces/", include("workspaces.urls")),
    path("notifications/", include("notifications.urls")),
    path("cluster/", ClusterView.as_view(), name="cluster"),
    path("overview/", OverviewView.as_view(), name="overview"),
    path("accounts/login/", sso_views.LoginView.as_view(), name="login"),
    # Ends the IdP's session too when the user came through single sign-on.
    path("accounts/logout/", sso_views.logout, name="logout"),
    path("accounts/sso/", include("tenants.sso.urls")),
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
