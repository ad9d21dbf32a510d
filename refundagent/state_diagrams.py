"""`python manage.py state_diagrams`: draw the state machines from their tables.

The ticket (`refundagent.ticket_state.TRANSITIONS`), the approval request
(`approvals.request_state.TRANSITIONS`) and the refund entry (`ledger.models.STATUS_TRANSITIONS`)
each have one table of transitions. This renders each as a Mermaid `stateDiagram-v2` and writes
it into docs/architecture.md between its marker comments, so the picture is the table; a test
(refundagent/tests/test_state_diagrams.py) fails when a table changed and the doc was not
regenerated. It lives in refundagent, the highest app with a state machine, which may read the
tables of the apps below it.
"""

import re
from pathlib import Path

from approvals.models import ApprovalRequest
from approvals.request_state import TRANSITIONS as REQUEST_TRANSITIONS
from ledger.models import FIRST_STATUSES, STATUS_TRANSITIONS, RefundStatus

from .models import Ticket
from .ticket_state import TRANSITIONS as TICKET_TRANSITIONS

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
COMMAND = "python manage.py state_diagrams"


def state_machines() -> dict[str, tuple[list[str], list[str], list[tuple[str, str]]]]:
    """Each machine by name: (its statuses in declared order, the statuses a row starts in, its
    moves as (source, target) pairs), read from the tables."""

    def by_target(statuses, table):
        return [(source, to) for to in statuses for source in statuses if source in table[to]]

    def by_source(statuses, table):
        return [(source, to) for source in statuses for to in statuses if to in table.get(source, ())]

    tickets = [str(s) for s in Ticket.Status]
    requests = [str(s) for s in ApprovalRequest.Status]
    entries = [str(s) for s in RefundStatus]
    return {
        "ticket": (tickets, [Ticket.Status.QUEUED], by_target(tickets, TICKET_TRANSITIONS)),
        "approval-request": (
            requests,
            [ApprovalRequest.Status.PENDING],
            by_target(requests, REQUEST_TRANSITIONS),
        ),
        "refund-entry": (entries, [str(s) for s in FIRST_STATUSES], by_source(entries, STATUS_TRANSITIONS)),
    }


def state_diagram_mermaid(*, statuses: list[str], first: list[str], moves: list[tuple[str, str]]) -> str:
    """One machine as Mermaid: where a row starts, every move, and the statuses nothing leaves."""
    lines = ["```mermaid", "stateDiagram-v2"]
    lines += [f"    [*] --> {status}" for status in first]
    lines += [f"    {source} --> {to}" for source, to in moves]
    left = {source for source, _to in moves}
    lines += [f"    {status} --> [*]" for status in statuses if status not in left]
    lines.append("```")
    return "\n".join(lines)


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- state-diagram:{name}:start -->", f"<!-- state-diagram:{name}:end -->"


def architecture_doc_render(text: str) -> str:
    """`text` (docs/architecture.md) with each machine's diagram regenerated between its markers.
    A marker pair missing from the text is an error: the doc must show every machine."""
    for name, (statuses, first, moves) in state_machines().items():
        start, end = _markers(name)
        pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
        if not pattern.search(text):
            raise LookupError(f"docs/architecture.md has no {start} ... {end} markers")
        diagram = state_diagram_mermaid(statuses=statuses, first=[str(s) for s in first], moves=moves)
        block = f"{start}\n{diagram}\n{end}"
        text = pattern.sub(lambda _match, b=block: b, text, count=1)
    return text


def architecture_doc_regenerate() -> bool:
    """Write the diagrams into docs/architecture.md; True if it changed."""
    text = DOC.read_text()
    rendered = architecture_doc_render(text)
    if rendered != text:
        DOC.write_text(rendered)
    return rendered != text
