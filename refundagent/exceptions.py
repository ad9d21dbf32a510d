from ledger.exceptions import Conflict, DomainError, Forbidden, InvalidInput, NotFound  # noqa: F401


class TicketStateConflict(Conflict):
    code = "ticket_state_conflict"
