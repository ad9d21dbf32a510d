import json
import sys

from django.core.management.base import BaseCommand, CommandError

from ledger.exceptions import ImportRefused
from ledger.importing import orders_import


class Command(BaseCommand):
    help = (
        "Load customers and orders from a JSON file into a tenant (format: ledger/import_format.py). "
        "Safe to run twice; a bad file is refused whole and writes nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("path", help="the JSON file, or - for standard input")

    def handle(self, *args, path, **options):
        try:
            if path == "-":
                data = json.load(sys.stdin)
            else:
                with open(path, encoding="utf-8") as f:
                    data = json.load(f)
        except OSError as exc:
            raise CommandError(f"Cannot read {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise CommandError(f"{path} is not UTF-8 text ({exc}); save it as UTF-8.") from None
        except json.JSONDecodeError as exc:
            raise CommandError(f"{path} is not valid JSON: {exc}") from None
        except ValueError as exc:  # an integer longer than Python converts (4,300 digits)
            raise CommandError(f"{path} cannot be read as JSON: {exc}") from None
        except RecursionError:
            # Python's JSON parser gives up on nesting deeper than its recursion limit.
            raise CommandError(f"{path} is nested too deeply to be an import file.") from None
        try:
            result = orders_import(data=data)
        except ImportRefused as exc:
            raise CommandError(exc.message) from None
        for warning in result.warnings:
            self.stderr.write(self.style.WARNING(warning))
        self.stdout.write(self.style.SUCCESS(f"Imported {path}: {result.summary()}."))
        for conflict in result.conflicts:
            self.stderr.write(self.style.ERROR(f"conflict: {conflict}"))
        if result.conflicts:
            # Exit 1: a record the ledger contradicts was refused and needs a person.
            raise CommandError(
                f"{len(result.conflicts)} record(s) refused: they disagree with the ledger (listed above); "
                "everything else was imported."
            )
