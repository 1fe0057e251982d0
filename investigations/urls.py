from django.urls import path

from investigations import views

urlpatterns = [
    path("", views.inbox, name="inbox"),
    path("jobs/<int:job_id>/", views.job_page, name="job"),
    path("jobs/<int:job_id>/progress", views.job_progress, name="job-progress"),
]
