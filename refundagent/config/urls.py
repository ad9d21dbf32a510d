from django.contrib import admin
from django.urls import include, path

from ledger.views import stripe_webhook

from .api import api

admin.site.site_header = "refundagent — review and operations"
admin.site.site_title = "refundagent admin"
admin.site.index_title = "Finance review queue, ledger, agent runs and evals"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("webhooks/stripe", stripe_webhook, name="stripe-webhook"),
    path("evals/", include("evals.urls")),
    path("", include("refundagent.web_urls")),
]
