"""The one registry of suites: each names its data, an empty suite fails loudly, "all" means all."""

import dataclasses

import pytest
from django.core.management import CommandError, call_command

from evals.cases import ALL, SUITES, SuiteEmptyError, suites_select
from evals.cases.release_gate import release_gate_cases
from evals.cases.tau import tau_cases
from evals.models import EvalCase, EvalRun
from evals.tau import TAU_DATA_DIR


def test_every_suite_names_its_cases_source_and_tau_retail_its_vendored_data():
    assert list(SUITES) == ["release_gate", "tau_retail"]
    assert SUITES["tau_retail"].data_dir == TAU_DATA_DIR
    assert SUITES["tau_retail"].missing() == []
    assert [s.name for s in suites_select(ALL)] == list(SUITES)
    with pytest.raises(ValueError, match="Unknown suite 'nope'"):
        suites_select("nope")


def test_a_suite_whose_data_file_is_missing_says_which_file(tmp_path, monkeypatch):
    # given the τ-bench suite pointed at a copy of its data without tasks_dev.json
    for name in SUITES["tau_retail"].data_files:
        if name != "tasks_dev.json":
            (tmp_path / name).symlink_to(TAU_DATA_DIR / name)
    suite = dataclasses.replace(SUITES["tau_retail"], data_dir=tmp_path)

    # when its cases are built, then it fails naming the missing file
    with pytest.raises(SuiteEmptyError) as error:
        suite.cases()
    assert str(error.value) == f"suite tau_retail: no cases: {tmp_path / 'tasks_dev.json'} not found"


def test_a_missing_file_inside_the_repository_is_named_by_its_path_in_the_repository():
    suite = dataclasses.replace(SUITES["tau_retail"], data_files=("tasks_test.json",))

    with pytest.raises(SuiteEmptyError) as error:
        suite.cases()

    assert str(error.value) == "suite tau_retail: no cases: evals/data/tau_bench_retail/tasks_test.json not found"


def test_a_suite_that_builds_no_case_fails_too():
    suite = dataclasses.replace(SUITES["release_gate"], build=lambda _data_dir: [])

    with pytest.raises(SuiteEmptyError, match="^suite release_gate: no cases: evals/cases/release_gate.py built none$"):
        suite.cases()


@pytest.mark.django_db
def test_run_evals_on_a_suite_without_its_data_exits_non_zero_and_says_what_is_missing(tmp_path, monkeypatch, capsys):
    # given the τ-bench suite whose data directory is empty
    monkeypatch.setitem(SUITES, "tau_retail", dataclasses.replace(SUITES["tau_retail"], data_dir=tmp_path))
    why = f"suite tau_retail: no cases: {tmp_path / 'users.json'}"

    # when run_evals runs it
    with pytest.raises(CommandError) as error:
        call_command("run_evals", "--suite", "tau_retail")

    # then it fails, prints what is missing, and the stored run records it
    assert why in str(error.value) and "tasks_dev.json not found" in str(error.value)
    assert why in capsys.readouterr().err
    run = EvalRun.objects.get()
    assert run.passed is False and run.total == 0
    assert [(f["metric"], f["value"], f["suite"]) for f in run.gate_failures] == [("cases", 0, "tau_retail")]
    assert run.gate_failures[0]["why"].startswith(why)


@pytest.mark.django_db
def test_an_empty_suite_fails_the_release_gate_even_when_the_other_suite_passes(tmp_path, monkeypatch):
    from evals.services import eval_run_execute

    monkeypatch.setitem(SUITES, "tau_retail", dataclasses.replace(SUITES["tau_retail"], data_dir=tmp_path))
    run = eval_run_execute(suite=ALL, trigger=EvalRun.Trigger.TEST)  # every release_gate case runs
    assert run.total == len(release_gate_cases()) and run.failed_count == 0
    assert run.passed is False
    assert [f["suite"] for f in run.gate_failures if f["metric"] == "cases"] == ["tau_retail"]
    assert not EvalCase.objects.filter(suite="tau_retail").exists()


@pytest.mark.django_db
def test_all_and_no_suite_both_sync_and_select_every_tau_case():
    from evals.services import eval_cases_select, evals_cases_sync

    # given every suite synced
    synced = evals_cases_sync(suites=suites_select(ALL))
    tau = len(tau_cases())
    assert synced["empty"] == {} and tau > 400
    assert synced["total"] == len(release_gate_cases()) + tau

    # then "all" selects them all, τ-bench included
    assert eval_cases_select(ALL).count() == synced["total"]
    assert eval_cases_select(ALL).filter(suite="tau_retail").count() == tau
    assert eval_cases_select("tau_retail").count() == tau


@pytest.mark.django_db
@pytest.mark.parametrize("suite_args", [[], ["--suite", "all"]])
def test_run_evals_without_a_suite_or_with_all_runs_tau_cases(suite_args, capsys):
    # given one case of each suite (running all 450 here would take minutes)
    release = release_gate_cases()[0]["name"]
    tau = tau_cases()[0]["name"]

    # when run_evals runs without --suite and with --suite all
    call_command("run_evals", *suite_args, "--case", release, "--case", tau)

    # then both suites' cases ran
    run = EvalRun.objects.get()
    assert run.suite == ALL
    assert sorted(run.results.values_list("case__suite", flat=True)) == ["release_gate", "tau_retail"]
    out = capsys.readouterr().out
    assert tau in out and "gate=passed" in out


@pytest.mark.django_db
def test_a_suite_whose_cases_are_all_switched_off_fails_the_release_gate():
    from evals.services import eval_run_execute, evals_cases_sync

    # given every release_gate case switched off by an operator
    evals_cases_sync(suites=suites_select("release_gate"))
    EvalCase.objects.filter(suite="release_gate").update(enabled=False)

    # when the suite runs
    run = eval_run_execute(suite="release_gate", trigger=EvalRun.Trigger.TEST)

    # then nothing ran and the run failed, saying why
    assert run.total == 0 and run.passed is False
    assert [f["why"] for f in run.gate_failures] == [
        "suite release_gate: no cases: no enabled EvalCase rows (switched off in the admin, or never synced)"
    ]


@pytest.mark.django_db
def test_a_suite_whose_data_went_missing_is_not_run_from_rows_an_earlier_sync_left(tmp_path, monkeypatch):
    from evals.services import eval_run_execute, evals_cases_sync

    # given the τ-bench cases synced once, and then its data gone
    evals_cases_sync(suites=suites_select("tau_retail"))
    monkeypatch.setitem(SUITES, "tau_retail", dataclasses.replace(SUITES["tau_retail"], data_dir=tmp_path))

    # when the suite runs
    run = eval_run_execute(suite="tau_retail", trigger=EvalRun.Trigger.TEST)

    # then none of the stale rows ran and the run failed, naming what is missing
    assert run.total == 0 and run.passed is False
    assert run.gate_failures[0]["why"].startswith(f"suite tau_retail: no cases: {tmp_path / 'users.json'}")
