from django.apps import AppConfig


class EvalsConfig(AppConfig):
    name = "evals"
    # What each role may do with the evals' models (see ledger/tenancy.py, roles_sync).
    # Operators watch the runs and may switch a case off.
    role_permissions = {
        "operator": ["evals.view_evalcase", "evals.change_evalcase", "evals.view_evalrun", "evals.view_evalresult"],
    }
