"""Eval case definitions and the one registry of suites.

Cases are data: each is a dict that `evals.services.evals_cases_sync` writes into an EvalCase row
(visible and editable in the admin). A case dict has: name, suite, tags, description,
ticket_input, fixture, provider_script (or None) and expected. See docs/evals.md for the fields
of `fixture` and `expected`.

Every suite names where its cases come from and the data files they are built from, so a suite
that cannot build its cases says what is missing instead of running nothing.
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from evals.tau import TAU_DATA_DIR, tau_load

from .release_gate import release_gate_cases
from .tau import TAU_DATA_FILES, tau_cases

ALL = "all"


class SuiteEmptyError(Exception):
    """A suite has no cases; the message says which suite and what is missing."""


def _shown(path: Path) -> str:
    """A path as a reader of the repository finds it: relative to the repository when inside it."""
    try:
        return str(path.resolve().relative_to(Path(settings.BASE_DIR).resolve()))
    except ValueError:
        return str(path)


@dataclass(frozen=True)
class Suite:
    name: str
    source: str  # the module that defines the cases
    build: Callable[[Path | None], list[dict]]  # data_dir -> case dicts
    data_dir: Path | None = None  # where its data lives; None when the cases are written in code
    data_files: tuple[str, ...] = ()  # the files under data_dir the cases are built from

    def missing(self) -> list[Path]:
        if self.data_dir is None:
            return []
        return [self.data_dir / name for name in self.data_files if not (self.data_dir / name).is_file()]

    def cases(self) -> list[dict]:
        """The suite's case dicts; SuiteEmptyError when its data is missing or it builds none."""
        missing = self.missing()
        if missing:
            raise SuiteEmptyError(f"suite {self.name}: no cases: {', '.join(_shown(p) for p in missing)} not found")
        cases = self.build(self.data_dir)
        if not cases:
            where = f" from {_shown(self.data_dir)}" if self.data_dir else ""
            raise SuiteEmptyError(f"suite {self.name}: no cases: {self.source} built none{where}")
        strays = sorted(c["name"] for c in cases if c["suite"] != self.name)
        if strays:
            raise ValueError(f"suite {self.name}: cases of another suite: {', '.join(strays)}")
        return cases


SUITES: dict[str, Suite] = {
    suite.name: suite
    for suite in (
        Suite(name="release_gate", source="evals/cases/release_gate.py", build=lambda _data_dir: release_gate_cases()),
        Suite(
            name="tau_retail",
            source="evals/cases/tau.py",
            build=lambda data_dir: tau_cases(tau_load(data_dir)),
            data_dir=TAU_DATA_DIR,
            data_files=TAU_DATA_FILES,
        ),
    )
}
SUITE_CHOICES = (*SUITES, ALL)


def suites_select(name: str) -> list[Suite]:
    """The suites a run of `name` covers: one suite, or every suite for "all"."""
    if name == ALL:
        return list(SUITES.values())
    if name not in SUITES:
        raise ValueError(f"Unknown suite {name!r}; one of {', '.join(SUITE_CHOICES)}.")
    return [SUITES[name]]


def cases_all() -> list[dict]:
    """Every suite's cases; SuiteEmptyError if any suite has none."""
    return [case for suite in SUITES.values() for case in suite.cases()]
