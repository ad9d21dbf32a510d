from django.core.management.base import BaseCommand

from refundagent.state_diagrams import DOC, architecture_doc_regenerate


class Command(BaseCommand):
    help = "Draw the ticket, approval request and refund entry state diagrams into docs/architecture.md."

    def handle(self, *args, **options):
        changed = architecture_doc_regenerate()
        self.stdout.write(f"{DOC}: state diagrams {'regenerated' if changed else 'up to date'}.")
