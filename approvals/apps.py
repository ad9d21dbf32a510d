from importlib import import_module

from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    # What each role may do with the approvals' models (see ledger/tenancy.py, roles_sync).
    # Finance decides approvals. Operators see the installation's kill switches (superusers flip
    # them) and switch capabilities off for their own tenant (TenantCapability).
    role_permissions = {
        "finance": [
            "approvals.view_approvalrequest",
            "approvals.approve_approvalrequest",
            "approvals.view_approvalvote",
            "approvals.view_refundpolicy",
            # Drafting a policy (copy the current one, edit its rules), replaying and publishing it.
            "approvals.add_refundpolicy",
            "approvals.change_refundpolicy",
            "approvals.view_policyreplay",
            "approvals.view_decisionrecord",
        ],
        "operator": [
            "approvals.view_capability",
            "approvals.view_tenantcapability",
            "approvals.add_tenantcapability",
            "approvals.change_tenantcapability",
            "approvals.view_refundpolicy",
            "approvals.add_refundpolicy",
            "approvals.change_refundpolicy",
            "approvals.view_policyreplay",
            "approvals.view_decisionrecord",
        ],
    }

    def ready(self):
        # Connects the receiver of the ledger's refund status changes (a refused payout, a late
        # success): the module needs the models loaded, so it is imported once the app is ready.
        import_module(f"{self.name}.ledger_events")
