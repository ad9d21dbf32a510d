from django.urls import path

from . import views

app_name = "evals"

urlpatterns = [
    path("", views.evals_dashboard, name="dashboard"),
    path("operations/", views.operations_dashboard, name="operations"),
    path("runs/<int:pk>/", views.eval_run_detail, name="run"),
    path("results/<int:pk>/trace.json", views.result_trace, name="result_trace"),
]
