from django.contrib import admin
from django.shortcuts import redirect
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

from ledger.tenancy import user_roles
from ledger.views import shopify_webhook, stripe_webhook
from refundagent.inbox import urls as inbox_urls
from refundagent.zendesk.views import zendesk_webhook

from .api import api

admin.site.site_header = "refundagent — review and operations"
admin.site.site_title = "refundagent admin"
admin.site.index_title = "Finance review queue, ledger, agent runs and evals"


class FaviconRedirect(RedirectView):
    """Browsers ask for /favicon.ico whatever the link tags say. The static URL is resolved per
    request: with the hashed static storage it needs the manifest, which import time may not have."""

    permanent = True

    def get_redirect_url(self, *args, **kwargs):
        return static("refundagent/favicon.svg")


def admin_home(request):
    """Finance comes to the admin to decide refunds: their front page is the review queue. Others
    (operators, superusers) keep the admin's index of everything."""
    if not request.user.is_superuser and "finance" in user_roles(request.user):
        return redirect("admin:approvals_approvalrequest_changelist")
    return admin.site.index(request)


urlpatterns = [
    path("favicon.ico", FaviconRedirect.as_view()),
    path("admin/", admin.site.admin_view(admin_home), name="admin_home"),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("webhooks/stripe", stripe_webhook, name="stripe-webhook"),
    path("webhooks/shopify", shopify_webhook, name="shopify-webhook"),
    path("webhooks/zendesk", zendesk_webhook, name="zendesk-webhook"),
    # Inbound email for the support inbox: anymail's views behind the inbox's guard (docs/inbox.md).
    path("anymail/", include(inbox_urls)),
    path("evals/", include("evals.urls")),
    path("", include("refundagent.web_urls")),
]
