from django.apps import AppConfig


class EvalsConfig(AppConfig):
    name = "evals"
    # What each role may do with the evals' models (see ledger/tenancy.py, roles_sync).
    # Operators watch the runs. Eval cases and their expectations are the installation's (every
    # tenant's release gate): superusers change them, a tenant's operator does not.
    role_permissions = {
        "operator": ["evals.view_evalcase", "evals.view_evalrun", "evals.view_evalresult"],
    }
