import os

import django
from django.core.handlers.wsgi import WSGIHandler

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "refundagent.config.settings")
# get_wsgi_application(), in two steps: tracing and Sentry are set up after the apps loaded
# and before the handler loads the middleware (Django's instrumentation adds its own).
django.setup(set_prefix=False)

from .observability import observability_setup  # noqa: E402 - needs the apps loaded

observability_setup()
application = WSGIHandler()
