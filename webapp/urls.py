from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from webapp.api import api
from webapp.health import healthz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("", include("investigations.urls")),
]
