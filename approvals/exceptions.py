from ledger.exceptions import Conflict, DomainError, Forbidden, InvalidInput, NotFound  # noqa: F401


class ApprovalConflict(Conflict):
    """The request is no longer pending, expired, or the args hash differs from what was approved."""

    code = "approval_conflict"


class MakerChecker(Forbidden):
    code = "maker_checker"
