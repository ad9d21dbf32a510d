# The Celery app is loaded with Django so that @shared_task binds to it, and so that
# `celery -A refundagent` finds it. The one import of the wiring from the domain package:
# Python imports this __init__ before any refundagent.config module, so it is the only place
# that can do this (the layering test allows exactly this import).
from .config.celery import app as celery_app

__all__ = ("celery_app",)
