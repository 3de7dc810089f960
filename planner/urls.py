from django.urls import path

from planner import views

urlpatterns = [
    path("whatif/", views.WhatIfView.as_view(), name="planner-whatif"),
    path(
        "projects/<slug:slug>/rightsizing/",
        views.ProjectRightsizingView.as_view(),
        name="planner-project-rightsizing",
    ),
]
