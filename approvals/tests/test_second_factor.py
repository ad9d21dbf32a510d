"""Everyone who can approve money confirms a TOTP device (django-otp) in the session before the
admin's decision views, or the API on a session, let them decide. A password alone decides
nothing while APPROVER_SECOND_FACTOR is on (the default whenever DEBUG is off)."""

import pytest
from django.test import Client
from django.urls import reverse
from django_otp.oath import totp
from django_otp.plugins.otp_totp.models import TOTPDevice

from approvals.models import ApprovalVote
from tests.helpers import signed_in

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _second_factor_on(settings):
    settings.APPROVER_SECOND_FACTOR = True


def decide_url(request, decision="approve"):
    return reverse("admin:approvals_approvalrequest_decide", args=[request.pk, decision])


def code(device):
    return f"{totp(device.bin_key, device.step, device.t0, device.digits, device.drift):06d}"


def pending(request):
    request.refresh_from_db()
    return request.status == "pending" and not ApprovalVote.objects.filter(request=request).exists()


def test_an_approver_without_a_confirmed_device_cannot_decide(file_request, people):
    request = file_request("120.00")
    # an unconfirmed device (set up but never confirmed) does not count
    TOTPDevice.objects.create(user=people["finance"], name="phone", confirmed=False)
    finance = signed_in(people["finance"])

    page = finance.get(decide_url(request))
    post = finance.post(decide_url(request), {"args_hash": request.args_hash, "note": "ok"})

    assert page.status_code == post.status_code == 403
    assert "second factor" in post.content.decode()
    assert pending(request)


def test_an_approver_with_a_device_enters_its_code_before_deciding(
    file_request, people, django_capture_on_commit_callbacks
):
    request = file_request("120.00")
    device = TOTPDevice.objects.create(user=people["finance"], name="phone", confirmed=True)
    finance = signed_in(people["finance"])
    # when they post a decision with the password's session alone: sent to the code page, nothing decided
    refused = finance.post(decide_url(request), {"args_hash": request.args_hash, "note": "ok"})
    assert refused.status_code == 302
    assert refused["Location"].startswith(reverse("admin:approvals_approvalrequest_second_factor"))
    assert pending(request)
    # a wrong code keeps them out
    wrong = finance.post(refused["Location"], {"otp_token": "000000" if code(device) != "000000" else "111111"})
    assert wrong.status_code == 422
    assert finance.post(decide_url(request), {"args_hash": request.args_hash, "note": "ok"}).status_code == 302
    assert pending(request)
    # (django-otp throttles a device after a wrong code: wait it out, as a person would)
    device.refresh_from_db()
    device.throttle_reset()
    # the right code, then the decision goes through
    verified = finance.post(refused["Location"], {"otp_token": code(device)})
    assert verified.status_code == 302 and verified["Location"] == decide_url(request)
    with django_capture_on_commit_callbacks(execute=True):
        done = finance.post(decide_url(request), {"args_hash": request.args_hash, "note": "ok"})
    assert done.status_code == 302
    request.refresh_from_db()
    assert request.status == "approved" and request.decided_by == people["finance"]


def test_a_session_cannot_decide_through_the_api_without_the_second_factor(file_request, people):
    request = file_request("120.00")
    TOTPDevice.objects.create(user=people["finance"], name="phone", confirmed=True)
    finance = Client(enforce_csrf_checks=False)
    finance.force_login(people["finance"])

    response = finance.post(
        f"/api/approvals/{request.pk}/decision",
        {"decision": "approve", "args_hash": request.args_hash},
        content_type="application/json",
    )

    assert response.status_code == 403
    assert response.json()["code"] == "second_factor_required"
    assert pending(request)


def test_the_code_page_sends_back_only_to_this_site(file_request, people):
    device = TOTPDevice.objects.create(user=people["finance"], name="phone", confirmed=True)
    finance = signed_in(people["finance"])
    url = reverse("admin:approvals_approvalrequest_second_factor")

    response = finance.post(f"{url}?next=https://evil.example/", {"otp_token": code(device)})

    assert response.status_code == 302
    assert response["Location"] == reverse("admin:approvals_approvalrequest_changelist")


def test_with_the_switch_off_the_decision_page_says_so(file_request, people, settings):
    settings.APPROVER_SECOND_FACTOR = False
    request = file_request("120.00")

    page = signed_in(people["finance"]).get(decide_url(request))

    assert page.status_code == 200
    assert 'id="ra-second-factor-off"' in page.content.decode()


def test_the_command_makes_a_confirmed_device_and_prints_its_url(people, capsys):
    from django.core.management import call_command

    call_command("otp_device_create", "finance")

    device = TOTPDevice.objects.get(user=people["finance"])
    assert device.confirmed
    assert "otpauth://totp/" in capsys.readouterr().out
