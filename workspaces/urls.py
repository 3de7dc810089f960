from django.urls import path

from workspaces import views

urlpatterns = [
    path("", views.WorkspaceListView.as_view(), name="workspace-list"),
    path("<int:pk>/", views.WorkspaceDetailView.as_view(), name="workspace-detail"),
    path("<int:pk>/stop/", views.WorkspaceStopView.as_view(), name="workspace-stop"),
    path("<int:pk>/start/", views.WorkspaceStartAgainView.as_view(), name="workspace-start"),
]
