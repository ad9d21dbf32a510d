"""The checks behind GET /api/health (docs/operations.md, "Health").

Each check answers "ok", "eager" (no broker: tasks run in-process, nothing to ping) or
"error: <why>"; any error makes the endpoint answer 503. `details` gives the numbers behind the
ages (the endpoint shows them to staff only). It tells ages and counts, never whose tickets.
"""

from collections.abc import Callable

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from django.db.models import Count, Max, Min, Q
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from approvals.followups import approval_followups_undelivered
from approvals.models import ApprovalRequest
from refundagent.models import Ticket

from .celery import app as celery_app

# The periodic task whose last run tells that beat is alive: the approvals' expiry sweep.
BEAT_TASK = "approvals.tasks.approval_requests_expire_task"
_migrations_ok = {"ok": False}


def health_report() -> tuple[int, dict]:
    """(HTTP status, body): 200 when every check is ok (or eager), else 503."""
    body: dict = {"status": "ok"}
    details: dict = {}
    database = _check(body, "database", _database)
    broker = _check(body, "broker", _broker)
    eager = settings.CELERY_TASK_ALWAYS_EAGER
    if eager:
        body["worker"] = body["beat"] = "eager"
    else:
        body["worker"] = _worker() if broker == "ok" else "error: the broker is unreachable"
        _check(body, "beat", lambda: _beat(details), needs=database)
    _check(body, "migrations", _migrations, needs=database)
    _check(
        body,
        "queued_tickets",
        lambda: _oldest(
            details,
            "queued_tickets",
            Ticket.objects.filter(status=Ticket.Status.QUEUED),
            "created_at",
            settings.HEALTH_QUEUED_TICKET_MAX_AGE,
        ),
        needs=database,
    )
    _check(
        body,
        "approved_unexecuted",
        lambda: _oldest(
            details,
            "approved_unexecuted",
            # A refund waiting for finance to pay it by hand is a person's task, not a stuck worker.
            ApprovalRequest.objects.filter(status=ApprovalRequest.Status.APPROVED).exclude(
                ledger_entry__gateway="manual", ledger_entry__status="pending"
            ),
            "decided_at",
            settings.HEALTH_APPROVED_UNEXECUTED_MAX_AGE,
        ),
        needs=database,
    )
    _check(body, "ticket_followups", lambda: _followups(details), needs=database)
    failing = [name for name, value in body.items() if name != "status" and value.startswith("error")]
    if failing:
        body["status"] = "error"
    body["details"] = details
    return (503 if failing else 200), body


def health_live_report() -> tuple[int, dict]:
    """(HTTP status, body) of the liveness check: 200 while this process reaches its database."""
    body: dict = {"status": "ok"}
    if _check(body, "database", _database) != "ok":
        body["status"] = "error"
        return 503, body
    return 200, body


def _check(body: dict, name: str, check: Callable[[], str], needs: str = "ok") -> str:
    if needs != "ok":
        body[name] = "error: the database is unreachable"
        return body[name]
    try:
        body[name] = check()
    except Exception as exc:  # noqa: BLE001 - a health check reports, it does not raise
        body[name] = f"error: {type(exc).__name__}"
    return body[name]


def _database() -> str:
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute("SELECT 1")
    return "ok"


def _broker() -> str:
    if settings.CELERY_TASK_ALWAYS_EAGER:
        return "eager"
    with celery_app.connection_for_write(settings.CELERY_BROKER_URL) as conn:
        conn.ensure_connection(max_retries=1, timeout=2)
    return "ok"


def _worker() -> str:
    try:
        replies = celery_app.control.ping(timeout=settings.HEALTH_WORKER_PING_TIMEOUT)
    except Exception as exc:  # noqa: BLE001
        return f"error: {type(exc).__name__}"
    if not replies:
        return f"error: no worker answered a ping within {settings.HEALTH_WORKER_PING_TIMEOUT} s"
    return "ok"


def _beat(details: dict) -> str:
    task = PeriodicTask.objects.filter(task=BEAT_TASK).select_related("interval").first()
    if task is None:
        return f"error: {BEAT_TASK} is not scheduled"
    if not task.enabled:
        return f"error: {task.name!r} is disabled"
    every = task.interval.schedule.run_every if task.interval_id else None
    details["beat"] = {
        "task": task.name,
        "last_run_at": task.last_run_at and task.last_run_at.isoformat(),
        "interval_seconds": every and int(every.total_seconds()),
    }
    if task.last_run_at is None:
        # A fresh deployment: beat runs the task one interval after it starts. Failing only
        # once that interval is late, like a task that ran, keeps a new deployment healthy.
        since = timezone.now() - task.date_changed
        details["beat"]["waiting_seconds"] = int(since.total_seconds())
        if every is None or since <= every * settings.HEALTH_BEAT_LATE_INTERVALS:
            return "ok"
        return f"error: {task.name!r} never ran in {int(since.total_seconds())} s (is beat running?)"
    if every is not None:
        late = timezone.now() - task.last_run_at
        if late > every * settings.HEALTH_BEAT_LATE_INTERVALS:
            return f"error: {task.name!r} last ran {int(late.total_seconds())} s ago"
    return "ok"


def _oldest(details: dict, name: str, queryset, field: str, limit) -> str:
    found = queryset.aggregate(oldest=Min(field), count=Count("pk"))
    age = timezone.now() - found["oldest"] if found["oldest"] else None
    details[name] = {
        "count": found["count"],
        "oldest_age_seconds": age and int(age.total_seconds()),
        "threshold_seconds": int(limit.total_seconds()),
    }
    if age is not None and age > limit:
        return f"error: the oldest is {int(age.total_seconds())} s old (threshold {int(limit.total_seconds())} s)"
    return "ok"


def _followups(details: dict) -> str:
    """Approval events a receiver failed to take (a ticket behind its approval and its money),
    waiting for the sweep's next attempt: failing once the oldest waits longer than the threshold."""
    limit = settings.HEALTH_FOLLOWUP_MAX_AGE
    found = approval_followups_undelivered().aggregate(
        oldest=Min("created_at"),
        count=Count("pk"),
        failing=Count("pk", filter=Q(attempts__gt=0)),
        most_attempts=Max("attempts"),
    )
    age = timezone.now() - found["oldest"] if found["oldest"] else None
    details["ticket_followups"] = {
        "count": found["count"],
        "failing": found["failing"],
        "most_attempts": found["most_attempts"] or 0,
        "oldest_age_seconds": age and int(age.total_seconds()),
        "threshold_seconds": int(limit.total_seconds()),
    }
    if age is not None and age > limit:
        return (
            f"error: an approval event has waited {int(age.total_seconds())} s to reach its ticket "
            f"(threshold {int(limit.total_seconds())} s)"
        )
    return "ok"


def _migrations() -> str:
    if _migrations_ok["ok"]:
        return "ok"  # applied once means applied for this process's code
    connection = connections[DEFAULT_DB_ALIAS]
    executor = MigrationExecutor(connection)
    pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if pending:
        return f"error: {len(pending)} migration(s) not applied"
    _migrations_ok["ok"] = True
    return "ok"
