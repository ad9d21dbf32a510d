import os

import django
from django.core.handlers.asgi import ASGIHandler

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "refundagent.config.settings")
# get_asgi_application(), in two steps: see wsgi.py.
django.setup(set_prefix=False)

from .observability import observability_setup  # noqa: E402 - needs the apps loaded

observability_setup()
application = ASGIHandler()
