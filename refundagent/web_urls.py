"""The support web UI (Django templates, session login)."""

from django.contrib.auth import views as auth_views
from django.urls import path
from django.views.generic import RedirectView

from . import views

urlpatterns = [
    path(
        "login/",
        auth_views.LoginView.as_view(template_name="registration/login.html", redirect_authenticated_user=True),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", RedirectView.as_view(pattern_name="tickets"), name="home"),
    path("tickets/", views.ticket_list, name="tickets"),
    path("tickets/new/", views.ticket_new, name="ticket_new"),
    path("tickets/new/methods.json", views.ticket_new_methods, name="ticket_new_methods"),
    path("tickets/<int:pk>/", views.ticket_detail, name="ticket"),
    path("tickets/<int:pk>/status.json", views.ticket_status, name="ticket_status"),
    path("tickets/<int:pk>/escalate/", views.ticket_escalate_view, name="ticket_escalate"),
    path("tickets/<int:pk>/close/", views.ticket_close_view, name="ticket_close"),
    path("tickets/<int:pk>/assign/", views.ticket_assign_view, name="ticket_assign"),
    path("tickets/<int:pk>/propose/", views.ticket_propose_view, name="ticket_propose"),
    path("tickets/<int:pk>/reply/", views.ticket_reply_view, name="ticket_reply"),
    path("queue/", views.ticket_queue, name="ticket_queue"),
]
