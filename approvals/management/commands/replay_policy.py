"""manage.py replay_policy --tenant SLUG --draft VERSION [--days 30]: replay the recorded gate
decisions of the window with the draft (approvals.replay); print the table, then the one-line
summary docs/api.md gives. Writes nothing but the replay's own record."""

from django.core.management.base import BaseCommand, CommandError

from approvals.replay import DEFAULT_DAYS, policy_replay_create, policy_replay_run, policy_replay_summary
from ledger.exceptions import DomainError

from ._policy_args import tenant_by_slug

# Who decided a recorded decision, as the table's rows and flipped tickets say it.
SOURCE_WORDS = {"agent": "agent decisions", "proposal": "people's proposals"}
FLIP_SOURCE_WORDS = {"agent": "agent", "proposal": "person"}


class Command(BaseCommand):
    help = "Replay the recorded gate decisions of the last days with a draft policy."

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--draft", required=True, help="The draft's version.")
        parser.add_argument("--days", type=int, default=DEFAULT_DAYS)

    def handle(self, *args, tenant, draft, days, **options):
        tenant = tenant_by_slug(tenant)
        try:
            replay = policy_replay_create(tenant=tenant, draft_version=draft, days=days)
        except DomainError as error:
            raise CommandError(error.message) from None
        replay = policy_replay_run(replay_id=replay.pk)
        if replay.status != replay.Status.DONE:
            raise CommandError(replay.error or f"Replay #{replay.pk} did not finish.")
        for line in replay_table(replay):
            self.stdout.write(line)
        self.stdout.write(policy_replay_summary(replay))


def replay_table(replay) -> list[str]:
    result = replay.result
    lines = [
        f"Replay #{replay.pk} of {replay.draft.version} for {replay.tenant.slug}: "
        f"{replay.since:%Y-%m-%d %H:%M} to {replay.until:%Y-%m-%d %H:%M} UTC ({replay.window_days} days)",
        f"{'decisions':<28}{result['decisions']:>10}",
        f"{'  of them backfilled':<28}{result['backfilled']:>10}",
        f"{'  not replayable':<28}{result.get('not_replayable', 0):>10}",
        f"{'flipped':<28}{result['flipped']:>10}",
    ]
    for direction, count in result["directions"].items():
        lines.append(f"{'  ' + direction:<28}{count:>10}")
    # Agent decisions and people's proposals apart (a replay made before proposals were recorded has none).
    for source, counts in (result.get("sources") or {}).items():
        lines.append(
            f"{SOURCE_WORDS.get(source, source):<28}{counts['decisions']:>10}{' flipped':<9}{counts['flipped']:>6}"
        )
        if counts.get("waivers_widened"):
            lines.append(f"{'  waiving a rule more':<28}{counts['waivers_widened']:>10}")
    lines.append(f"{'dual control newly needed':<28}{result['dual_control_newly_needed']:>10}")
    for currency in sorted(set(result["allowed_before"]) | set(result["allowed_after"])):
        lines.append(
            f"{'allowed ' + currency:<28}{result['allowed_before'].get(currency, '0.00'):>14} -> "
            f"{result['allowed_after'].get(currency, '0.00'):>14}  difference {result['difference'][currency]}"
        )
    lines.append(f"{'rule':<28}{'before':>10}{'after':>10}")
    for code, counts in result["rules"].items():
        lines.append(f"{code:<28}{counts['before']:>10}{counts['after']:>10}")
    if result["flipped_tickets"]:
        lines.append(f"{'ticket':<10}{'order':<16}{'before':<20}{'after':<20}{'allowed before':>16}{'after':>12}  by")
    for flip in result["flipped_tickets"]:
        lines.append(
            f"{str(flip['ticket'] or '-'):<10}{flip['order'] or '-':<16}{flip['before']:<20}{flip['after']:<20}"
            f"{flip['allowed_before'] or '-':>16}{flip['allowed_after'] or '-':>12}"
            f"  {FLIP_SOURCE_WORDS.get(flip.get('source'), 'agent')}"
        )
    if result["flipped_listed"] < result["flipped"]:
        lines.append(f"(the first {result['flipped_listed']} of {result['flipped']} flipped tickets are listed)")
    return lines
