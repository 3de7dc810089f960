from django.urls import path

from tenants import views

urlpatterns = [
    path("", views.HomeView.as_view(), name="home"),
    path("profile/", views.ProfileView.as_view(), name="profile"),
    path(
        "profile/tokens/<str:token_key>/revoke/",
        views.TokenRevokeView.as_view(),
        name="token-revoke",
    ),
]
