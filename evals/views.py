"""The operators' page at /evals/: the pass-rate and false-allow trend over the last runs (an
inline SVG drawn on the server: no JavaScript, no CDN) and the last run's failures."""

from django.contrib.auth.decorators import login_required, user_passes_test
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, render

from ledger.exceptions import Forbidden
from ledger.tenancy import tenant_for_user, user_roles

from .cases import SUITE_CHOICES
from .models import EvalResult, EvalRun
from .operations import operations_overview
from .selectors import eval_run_failures, eval_runs_recent


def user_is_operator(user) -> bool:
    """Staff, or the operator role (which may view the runs): whoever the Evals link is shown to."""
    return user.is_active and (user.is_staff or user.has_perm("evals.view_evalrun"))


operator_required = user_passes_test(user_is_operator, login_url="admin:login")


def suite_menu() -> list[tuple[str, str]]:
    """The suite filter: "" for every run, then each suite once (the known ones and any that has
    runs). "all" is the suite of runs over every case, not a second "every suite"."""
    names = dict.fromkeys(
        [*SUITE_CHOICES, *EvalRun.objects.order_by("suite").values_list("suite", flat=True).distinct()]
    )
    return [("", "every run"), *((n, "all suites in one run" if n == "all" else n) for n in names)]


WIDTH, HEIGHT, PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 720, 240, 48, 48, 16, 36


def trend_chart(runs) -> dict:
    """Coordinates for the SVG: a pass-rate line (left axis, 0–100 %) and false-allow bars
    (right axis, counts), one slot per run."""
    plot_w, plot_h = WIDTH - PAD_LEFT - PAD_RIGHT, HEIGHT - PAD_TOP - PAD_BOTTOM
    n = len(runs)
    slot = plot_w / max(n, 1)
    max_fa = max([r.metrics.get("false_allow", 0) for r in runs] + [1])
    points, bars, labels = [], [], []
    for i, run in enumerate(runs):
        x = PAD_LEFT + slot * i + slot / 2
        # A run with no cases (or one that crashed before any) sits at 0 %, never 100 %.
        no_cases = not run.total
        rate = 0.0 if no_cases else float(run.metrics.get("pass_rate", 0) or 0)
        y = PAD_TOP + plot_h * (1 - rate)
        fa = run.metrics.get("false_allow", 0) or 0
        bar_h = plot_h * fa / max_fa
        points.append(
            {
                "x": round(x, 1),
                "y": round(y, 1),
                "run": run,
                "rate": round(rate * 100, 1),
                "failed_release_gate": run.passed is not True,
                "no_cases": no_cases,
            }
        )
        if fa:
            bars.append(
                {
                    "x": round(x - min(slot * 0.3, 10), 1),
                    "y": round(PAD_TOP + plot_h - bar_h, 1),
                    "w": round(min(slot * 0.6, 20), 1),
                    "h": round(bar_h, 1),
                    "value": fa,
                    "run": run,
                }
            )
        if n <= 12 or i % max(1, n // 12) == 0:
            labels.append({"x": round(x, 1), "text": f"#{run.pk}"})
    grid = [{"y": round(PAD_TOP + plot_h * (1 - p / 100), 1), "label": f"{p}%"} for p in (0, 25, 50, 75, 100)]
    return {
        "width": WIDTH,
        "height": HEIGHT,
        "left": PAD_LEFT,
        "right": WIDTH - PAD_RIGHT,
        "top": PAD_TOP,
        "bottom": HEIGHT - PAD_BOTTOM,
        "label_y": HEIGHT - PAD_BOTTOM + 16,
        "right_label_x": WIDTH - PAD_RIGHT + 6,
        "polyline": " ".join(f"{p['x']},{p['y']}" for p in points),
        "points": points,
        "bars": bars,
        "labels": labels,
        "grid": grid,
        "max_false_allow": max_fa,
    }


@operator_required
def evals_dashboard(request):
    menu = suite_menu()
    suite = request.GET.get("suite") or ""
    if suite not in dict(menu):
        suite = ""
    runs = eval_runs_recent(suite=suite or None, limit=30)
    last = runs[-1] if runs else None
    return render(
        request,
        "evals/dashboard.html",
        {
            "runs": runs,
            "recent": runs[::-1][:10],
            "last": last,
            "failures": eval_run_failures(last) if last else [],
            "chart": trend_chart(runs),
            "suite": suite,
            "suites": menu,
            "nav": "evals",
            "roles": user_roles(request.user),
        },
    )


# The run's metrics in words (evals.graders.metrics_compute); pass^k and any new metric are
# shown humanised, never as raw JSON.
METRIC_WORDS = {
    "cases": "Cases",
    "results": "Results (cases × repeats)",
    "passed": "Passed",
    "failed": "Failed",
    "pass_rate": "Pass rate",
    "false_allow": "False allows (a refund the gate should have stopped)",
    "missing_citation": "Drafts without a policy citation",
    "money_moved_by_agent": "Money moved by the agent (must be 0)",
    "draft_quality_pass_rate": "Draft quality pass rate",
    "drafts_graded": "Drafts graded",
    "blocking_failed": "Blocking cases failed",
    "judge_pass_rate": "LLM judge pass rate",
}


def metric_rows(metrics: dict) -> list[tuple[str, str, object]]:
    rows = []
    for name, value in (metrics or {}).items():
        words = METRIC_WORDS.get(name)
        if words is None:
            words = f"pass^{name[5:]} (every one of {name[5:]} tries passes)" if name.startswith("pass^") else name
            words = words.replace("_", " ").capitalize() if words == name else words
        if isinstance(value, float) and ("rate" in name or name.startswith("pass^")):
            value = f"{value:.1%}"
        rows.append((name, words, value))
    return rows


@operator_required
def eval_run_detail(request, pk: int):
    """One run, readable: the gate's verdict and why, its metrics, and every case's result."""
    run = get_object_or_404(EvalRun, pk=pk)
    return render(
        request,
        "evals/run.html",
        {
            "run": run,
            "metrics": metric_rows(run.metrics),
            "results": run.results.select_related("case").order_by("passed", "case__name", "attempt"),
            "nav": "evals",
            "roles": user_roles(request.user),
        },
    )


@operator_required
def result_trace(request, pk: int):
    """The trace stored with an eval result, as JSON (the case's own rows were rolled back)."""
    result = get_object_or_404(EvalResult.objects.select_related("case"), pk=pk)
    return JsonResponse(
        {
            "case": result.case.name,
            "run": result.run_id,
            "attempt": result.attempt,
            "trace_id": result.trace_id,
            "events": result.trace,
        }
    )


@login_required
def operations_dashboard(request):
    """The operator dashboard (docs/operations.md): staff or the operator role, the user's tenant."""
    user = request.user
    if not (user.is_staff or user.groups.filter(name="operator").exists()):
        return render(request, "403.html", {"reason": "The operations page is for staff and operators."}, status=403)
    try:
        tenant = tenant_for_user(user)
    except Forbidden as exc:
        return render(request, "403.html", {"reason": exc.message}, status=403)
    overview = operations_overview(tenant=tenant)
    return render(
        request,
        "evals/operations.html",
        {
            **overview,
            "tenant": tenant,
            "eval_chart": trend_chart(overview["eval_runs"]),
            "roles": user_roles(user),
            "nav": "operations",
        },
    )
