"""A decision's Idempotency-Key replay is answered only to a caller who may decide now."""

from ledger.models import IdempotencyKey


def decide(client, request, **headers):
    body = {"decision": "approve", "args_hash": request.args_hash, "note": "ok"}
    return client.post(f"/api/approvals/{request.pk}/decision", body, content_type="application/json", headers=headers)


def test_a_decider_whose_finance_role_was_removed_gets_no_replay(
    approval_request_make, api_client, user, django_capture_on_commit_callbacks
):
    request = approval_request_make(order="ORD-5001")
    finance = api_client("acme-finance")
    with django_capture_on_commit_callbacks(execute=False):
        first = decide(finance, request, **{"Idempotency-Key": "d-1"})
    assert first.status_code == 200
    approver = user("acme-finance")
    approver.groups.remove(approver.groups.get(name="finance"))

    replay = decide(finance, request, **{"Idempotency-Key": "d-1"})

    assert replay.status_code == 403
    assert replay.json()["code"] == "role_required"
    assert not replay.has_header("Idempotent-Replayed")
    assert IdempotencyKey.objects.filter(key="d-1", status_code=200).exists()
