from django.urls import path

from governance import views

urlpatterns = [
    path(
        "projects/<slug:slug>/gpu-limits/",
        views.MemberLimitSetView.as_view(),
        name="member-limit-set",
    ),
    path(
        "projects/<slug:slug>/gpu-limits/<int:limit_id>/remove/",
        views.MemberLimitRemoveView.as_view(),
        name="member-limit-remove",
    ),
    path(
        "projects/<slug:slug>/quota-requests/",
        views.QuotaRequestCreateView.as_view(),
        name="quota-request-create",
    ),
    path(
        "overview/quota-requests/<int:request_id>/decide/",
        views.QuotaRequestDecideView.as_view(),
        name="quota-request-decide",
    ),
]
