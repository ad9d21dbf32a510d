"""`manage.py demo` runs the product end to end and ends with one release-gate run, so the
operators' page /evals/ is not empty afterwards. On the embedded default the command empties its
database (here the test database) and migrates it again first; on DATABASE_URL's it does not."""

from io import StringIO

from django.contrib.auth import get_user_model
from django.core.management import call_command


def test_the_demo_ends_with_a_passed_release_gate_that_evals_shows(transactional_db, client, settings, tmp_path):
    settings.EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    settings.EMAIL_FILE_PATH = str(tmp_path / "sent-email")
    # when the demo runs
    out = StringIO()
    call_command("demo", stdout=out)
    text = out.getvalue()
    # then its story is unchanged, and the release gate ran once and passed
    for step in (
        "1. Database",
        "2. Demo data",
        "4. Finance approves",
        "5. Support sends the replies",
        "6. The ledger",
        "6b. Jane writes to acme's support inbox",
        "7. The release gate",
        "ORD-5001: refunded, ORD-5002: escalated",
    ):
        assert step in text, step
    # and it ends with who can sign in, with which roles, and which pages to open
    after = text.split("8. Sign in and look", 1)[1]
    for user_line in (
        "acme-support: support",
        "acme-finance: finance",
        "acme-finance2: finance",
        "acme-lead: support, finance",
        "globex-support: support",
        "ops: operator",
    ):
        assert user_line in after, user_line
    for page_line in ("/tickets/", "/queue/", "/admin/approvals/approvalrequest/", "/evals/operations/", "/api/docs"):
        assert page_line in after, page_line
    assert ".venv/bin/python manage.py runserver" in after
    # and the ORD-5001 refund waited for finance's payout by hand, recorded as a person would, before
    # its reply was written to the project's mail folder, once, without payment data
    assert "recorded the payout (reference DEMO-TRF-" in text
    written = next(line for line in text.splitlines() if "email written to" in line)  # ORD-5001's, filed first
    path = written.split("email written to ", 1)[1].strip()
    email = open(path).read()
    assert "Subject: Your refund request for order ORD-5001" in email and "Message-ID: <ticket-" in email
    assert "we have refunded 120.00 usd" in email.lower() and "4242" not in email
    # and one ticket came in from an email to acme's support address, Jane's, for the agent to place
    emailed = text.split("6b. Jane writes", 1)[1].split("7. The release gate", 1)[0]
    assert "email to support@acme.example from jane.doe@example.com" in emailed
    assert "(source email, customer CUST-1001, order " in emailed

    gate_line = next(line for line in text.splitlines() if "eval run #" in line)
    assert "gate passed" in gate_line and "pass rate 1.0" in gate_line, gate_line
    run_id = gate_line.split("eval run #", 1)[1].split(":", 1)[0]
    # and /evals/ shows that run to the operator
    client.force_login(get_user_model().objects.get(username="ops"))
    page = client.get("/evals/").content.decode()
    assert "No eval run yet" not in page and f"#{run_id}<" in page
