from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    # What each role may do with the approvals' models (see ledger/tenancy.py, roles_sync).
    # Finance decides approvals; operators switch capabilities off (the kill switch).
    role_permissions = {
        "finance": [
            "approvals.view_approvalrequest",
            "approvals.approve_approvalrequest",
            "approvals.view_approvalvote",
            "approvals.view_refundpolicy",
        ],
        "operator": ["approvals.view_capability", "approvals.change_capability"],
    }
