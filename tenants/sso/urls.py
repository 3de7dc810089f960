from django.urls import path

from tenants.sso import views

urlpatterns = [
    path("login/", views.sso_login, name="sso-login"),
    path("callback/", views.sso_callback, name="sso-callback"),
]
