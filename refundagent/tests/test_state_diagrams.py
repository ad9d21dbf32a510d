"""The state diagrams in docs/architecture.md are the transition tables, drawn."""

import pytest

from refundagent.state_diagrams import (
    COMMAND,
    DOC,
    architecture_doc_render,
    state_diagram_mermaid,
    state_machines,
)


def test_the_docs_diagrams_are_what_the_tables_draw_now():
    text = DOC.read_text()

    assert architecture_doc_render(text) == text, f"a transition table changed: run `{COMMAND}` and commit the doc"


def test_a_changed_table_would_change_the_doc(monkeypatch):
    # given the doc as it is, and the approval request's table with one move taken away
    from approvals.models import ApprovalRequest
    from approvals.request_state import TRANSITIONS

    text = DOC.read_text()
    narrowed = dict(TRANSITIONS)
    narrowed[ApprovalRequest.Status.EXPIRED] = frozenset()
    monkeypatch.setattr("refundagent.state_diagrams.REQUEST_TRANSITIONS", narrowed)

    # when the diagrams are drawn again
    rendered = architecture_doc_render(text)

    # then the doc no longer matches: the move is gone and expired is unreachable
    assert rendered != text
    assert "pending --> expired" in text and "pending --> expired" not in rendered


def test_every_machine_is_drawn_with_every_move_of_its_table():
    machines = state_machines()

    assert set(machines) == {"ticket", "approval-request", "refund-entry"}
    statuses, first, moves = machines["approval-request"]
    diagram = state_diagram_mermaid(statuses=statuses, first=first, moves=moves)
    assert diagram.splitlines()[:3] == ["```mermaid", "stateDiagram-v2", "    [*] --> pending"]
    assert all(f"    {source} --> {to}" in diagram.splitlines() for source, to in moves)
    # a status nothing leaves ends the diagram; one with a way out does not
    assert "    denied --> [*]" in diagram and "    approved --> [*]" not in diagram


def test_a_doc_without_the_markers_is_refused():
    with pytest.raises(LookupError, match="state-diagram:ticket:start"):
        architecture_doc_render("# Architecture\n")
