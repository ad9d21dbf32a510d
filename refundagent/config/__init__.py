"""The wiring: settings, the root urlconf, the API root, the Celery app, WSGI and ASGI.

The only code that knows every app (ledger, approvals, refundagent, evals). The domain
packages never import it; the layering test (config/tests/test_architecture.py) checks that.
"""
