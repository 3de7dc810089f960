from django.urls import path

from notifications import views

urlpatterns = [
    path("", views.SettingsView.as_view(), name="notification-settings"),
    path("webhooks/", views.WebhookCreateView.as_view(), name="notification-webhook-create"),
    path(
        "webhooks/<int:endpoint_id>/toggle/",
        views.WebhookToggleView.as_view(),
        name="notification-webhook-toggle",
    ),
    path(
        "webhooks/<int:endpoint_id>/delete/",
        views.WebhookDeleteView.as_view(),
        name="notification-webhook-delete",
    ),
]
