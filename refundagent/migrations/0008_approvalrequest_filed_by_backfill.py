"""Fill in `ApprovalRequest.filed_by` (approvals/0013) for the requests already made: the filer
of the ticket each one is for (`ticket_ref`). Here, not in approvals, because the tickets are
this app's and approvals may not know them."""

from django.db import migrations
from django.db.models import OuterRef, Subquery


def backfill(apps, schema_editor):
    ApprovalRequest = apps.get_model("approvals", "ApprovalRequest")
    Ticket = apps.get_model("refundagent", "Ticket")
    filer = Ticket.objects.filter(pk=OuterRef("ticket_ref")).values("created_by_id")[:1]
    ApprovalRequest.objects.filter(filed_by__isnull=True, ticket_ref__isnull=False).update(filed_by_id=Subquery(filer))


class Migration(migrations.Migration):
    dependencies = [
        ("refundagent", "0007_ticket_awaiting_person_since"),
        ("approvals", "0013_approvalrequest_filed_by"),
    ]

    operations = [migrations.RunPython(backfill, migrations.RunPython.noop)]
