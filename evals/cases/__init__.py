"""Eval case definitions. Cases are data: each is a dict that `evals.services.evals_cases_sync`
writes into an EvalCase row (visible and editable in the admin).

A case dict has: name, suite, tags, description, ticket_input, fixture, provider_script (or
None) and expected. See docs/evals.md for the fields of `fixture` and `expected`.
"""

SUITES = ("release_gate", "tau_retail")


def cases_all() -> list[dict]:
    from .release_gate import release_gate_cases
    from .tau import tau_cases

    return release_gate_cases() + tau_cases()
