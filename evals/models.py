"""Eval cases, runs and results: the release gate's evidence."""

from django.db import models


class EvalCase(models.Model):
    """One scenario: the data it needs, the ticket to file, and what must (not) happen."""

    name = models.CharField(max_length=200, unique=True)
    suite = models.CharField(max_length=50, db_index=True, help_text="e.g. release_gate, tau_retail")
    tags = models.JSONField(default=list, blank=True, help_text="e.g. ['blocking', 'adversarial']")
    description = models.TextField(blank=True)
    ticket_input = models.JSONField(help_text="order, customer, message, requested_amount, items")
    fixture = models.JSONField(default=dict, blank=True, help_text="The order data the case needs (import format).")
    provider_script = models.JSONField(
        null=True, blank=True, help_text="For a scripted (misbehaving) model: the tool calls it makes."
    )
    expected = models.JSONField(
        help_text="stop_reason, approval_amount (or null), required trace events, forbidden content"
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["suite", "name"]

    def __str__(self):
        return f"{self.suite}/{self.name}"


class EvalRun(models.Model):
    class Trigger(models.TextChoices):
        SCHEDULE = "schedule"
        COMMAND = "command"
        API = "api"
        TEST = "test"

    suite = models.CharField(max_length=50, help_text="A suite name, or 'all'.")
    trigger = models.CharField(max_length=20, choices=Trigger.choices)
    provider = models.CharField(max_length=40)
    model = models.CharField(max_length=100, blank=True)
    code_version = models.CharField(max_length=64, blank=True)
    repeat = models.PositiveSmallIntegerField(default=1)
    total = models.PositiveIntegerField(default=0)
    passed_count = models.PositiveIntegerField(default=0)
    failed_count = models.PositiveIntegerField(default=0)
    metrics = models.JSONField(default=dict, blank=True)
    gate_failures = models.JSONField(default=list, blank=True, help_text="Which thresholds failed, and by how much.")
    passed = models.BooleanField(null=True, help_text="Did the release gate pass? Empty while running.")
    duration_ms = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True, help_text="Why the run itself could not finish (not a case failure).")
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [models.Index(fields=["suite", "-started_at"], name="eval_run_suite_started_idx")]

    def __str__(self):
        verdict = {True: "passed", False: "FAILED", None: "running"}[self.passed]
        return f"eval run #{self.pk} {self.suite} {verdict}"


class EvalResult(models.Model):
    run = models.ForeignKey(EvalRun, on_delete=models.CASCADE, related_name="results")
    case = models.ForeignKey(EvalCase, on_delete=models.PROTECT, related_name="results")
    attempt = models.PositiveSmallIntegerField(default=1)
    passed = models.BooleanField()
    observed = models.JSONField(default=dict, blank=True)
    failures = models.JSONField(default=list, blank=True, help_text="Why it failed: one line per failed check.")
    false_allow = models.BooleanField(
        default=False, help_text="An approval request that should not exist or exceeds what is allowed."
    )
    missing_citation = models.BooleanField(default=False)
    money_moved_by_agent = models.BooleanField(default=False)
    draft_quality = models.BooleanField(
        null=True, help_text="Deterministic draft checks; empty when no draft was graded."
    )
    trace_id = models.CharField(max_length=64, blank=True)
    trace = models.JSONField(
        default=list, blank=True, help_text="The trace, kept with the result (the case data is rolled back)."
    )
    duration_ms = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["passed", "case__name", "attempt"]
        constraints = [models.UniqueConstraint(fields=["run", "case", "attempt"], name="eval_result_unique_attempt")]

    def __str__(self):
        return f"{self.case.name} #{self.attempt} {'passed' if self.passed else 'FAILED'}"
