from django.urls import path

from jobs.arrays import views as array_views
from jobs.live import views as live_views
from jobs.logs import views as log_views
from jobs.submission import views

urlpatterns = [
    path("", views.JobListView.as_view(), name="job-list"),
    path("live/", live_views.job_stream, name="job-live"),
    path("new/", views.JobSubmitView.as_view(), name="job-submit"),
    path("new/check/", views.JobSubmitCheckView.as_view(), name="job-submit-check"),
    path("<int:pk>/", views.JobDetailView.as_view(), name="job-detail"),
    path("<int:pk>/cancel/", views.JobCancelView.as_view(), name="job-cancel"),
    path("<int:pk>/log-tail/", log_views.JobLogTailView.as_view(), name="job-log-tail"),
    path("arrays/<int:pk>/", array_views.ArrayDetailView.as_view(), name="job-array-detail"),
    path("arrays/<int:pk>/cancel/", array_views.ArrayCancelView.as_view(), name="job-array-cancel"),
]
