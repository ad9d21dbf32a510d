"""The review page and the confirm page offer only the decisions that can still succeed
(`issues show 11`): no confirm on a decided or executed request, no second Approve for an
approver, nothing for the filer. A post is still put to the service."""

import pytest
from django.urls import reverse

from approvals.services.decisions import approval_decisions_open, approval_request_decide
from tests.factories import manual_payout_record
from tests.helpers import signed_in

pytestmark = pytest.mark.django_db


def change_url(request):
    return reverse("admin:approvals_approvalrequest_change", args=[request.pk])


def decide_url(request, decision):
    return reverse("admin:approvals_approvalrequest_decide", args=[request.pk, decision])


def test_an_executed_request_offers_no_confirmation(file_request, people, django_capture_on_commit_callbacks):
    # given a request finance approved and the runtime executed
    request = file_request("120.00")
    with django_capture_on_commit_callbacks(execute=True):
        approval_request_decide(
            request_id=request.pk, user=people["finance"], decision="approve", args_hash=request.args_hash
        )
    request = manual_payout_record(request)  # the manual gateway: finance paid by hand
    assert request.status == "executed"
    # when another finance user opens its approve or deny confirmation
    for decision in ("approve", "deny"):
        page = signed_in(people["finance2"]).get(decide_url(request, decision)).content.decode()
        # then there is no confirm button, and the page says why
        assert 'id="ra-confirm"' not in page and "Confirm approval" not in page, decision
        assert 'id="ra-cannot"' in page and "can no longer be decided" in page, decision
    # and the review page shows no decision button but the reason
    review = signed_in(people["finance2"]).get(change_url(request)).content.decode()
    assert 'id="ra-approve"' not in review and 'id="ra-deny"' not in review and 'id="ra-closed"' in review


def test_the_first_approver_is_not_offered_approve_again(file_request, people):
    # given a request above the threshold (two approvers) that finance approved once
    request = file_request("750.00")
    assert request.required_approvals == 2
    approval_request_decide(
        request_id=request.pk, user=people["finance"], decision="approve", args_hash=request.args_hash
    )
    first = signed_in(people["finance"])
    # when the first approver opens it again
    review = first.get(change_url(request)).content.decode()
    # then there is no Approve, the other decisions remain, and the page says a second approver is needed
    assert 'id="ra-approve"' not in review and 'id="ra-deny"' in review and 'id="ra-already-voted"' in review
    assert "1 of 2" in review
    confirm = first.get(decide_url(request, "approve")).content.decode()
    assert 'id="ra-confirm"' not in confirm and "already approved" in confirm
    assert 'id="ra-confirm"' in first.get(decide_url(request, "deny")).content.decode()
    # while the second approver is offered Approve
    second = signed_in(people["finance2"])
    assert 'id="ra-approve"' in second.get(change_url(request)).content.decode()
    assert 'id="ra-confirm"' in second.get(decide_url(request, "approve")).content.decode()


def test_open_decisions_follow_the_services_preconditions(file_request, people):
    request = file_request("120.00", filer="lead")
    # the filer: nothing (maker-checker)
    decisions, why = approval_decisions_open(request=request, user=people["lead"])
    assert decisions == [] and "maker" in why
    # support: nothing (not finance)
    assert approval_decisions_open(request=request, user=people["support"])[0] == []
    # finance: everything
    assert set(approval_decisions_open(request=request, user=people["finance"])[0]) == {
        "approve",
        "deny",
        "request_changes",
        "escalate",
    }
    # a denied request: nothing for anyone
    approval_request_decide(
        request_id=request.pk, user=people["finance"], decision="deny", args_hash=request.args_hash, note="No."
    )
    request.refresh_from_db()
    decisions, why = approval_decisions_open(request=request, user=people["finance2"])
    assert decisions == [] and "no longer be decided" in why
