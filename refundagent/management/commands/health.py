"""`manage.py health [--only beat,worker]`: the checks of /api/health, for container health checks.

Prints the report as JSON and exits 1 when a selected check fails (docker-compose.yml uses
`--only beat` for the beat container: its health is the sweep's last run).
"""

import json

from django.core.management.base import BaseCommand, CommandError

from refundagent.config.health import health_report


class Command(BaseCommand):
    help = "Run the health checks of /api/health; exit 1 if a (selected) check fails."

    def add_arguments(self, parser):
        parser.add_argument("--only", default="", help="Comma-separated checks to judge (default: all).")

    def handle(self, *args, only: str, **options):
        _status, body = health_report()
        names = [n.strip() for n in only.split(",") if n.strip()] or [k for k in body if k not in {"status", "details"}]
        unknown = [n for n in names if n not in body]
        if unknown:
            raise CommandError(f"Unknown check(s): {', '.join(unknown)}")
        selected = {name: body[name] for name in names}
        self.stdout.write(json.dumps({**selected, "details": body["details"]}, default=str))
        failing = [name for name, value in selected.items() if value.startswith("error")]
        if failing:
            raise CommandError(f"failing: {', '.join(failing)}", returncode=1)
