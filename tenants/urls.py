from django.urls import path

from tenants import views

urlpatterns = [
    path("", views.HomeView.as_view(), name="home"),
    path("projects/<slug:slug>/", views.ProjectView.as_view(), name="project"),
    path("projects/<slug:slug>/members/", views.MemberAddView.as_view(), name="member-add"),
    path(
        "projects/<slug:slug>/members/<int:membership_id>/role/",
        views.MemberRoleView.as_view(),
        name="member-role",
    ),
    path(
        "projects/<slug:slug>/members/<int:membership_id>/remove/",
        views.MemberRemoveView.as_view(),
        name="member-remove",
    ),
    path("profile/", views.ProfileView.as_view(), name="profile"),
    path(
        "profile/tokens/<str:token_key>/revoke/",
        views.TokenRevokeView.as_view(),
        name="token-revoke",
    ),
]
