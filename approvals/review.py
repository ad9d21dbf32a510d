"""What the finance review page shows beyond the approvals layer's own records.

The draft, the customer reply draft and the trace live in the agent app, a layer above, which
approvals may not import. That layer registers a provider here (refundagent/receivers.py does,
at import); the admin calls every provider for the request on screen.

A provider takes an ApprovalRequest and returns a list of sections, each
`{"title": str, "html": SafeString}` (escaped by the provider), shown in order. Optional keys
for the layout: "id" (the panel's HTML id), "beside" (shown next to the action summary, at the
top: what finance reads first) and "wide" (a whole row: long tables such as the trace).
"""

import logging
from collections.abc import Callable

logger = logging.getLogger(__name__)

ReviewContextProvider = Callable[..., list[dict]]
review_context_providers: list[ReviewContextProvider] = []


def review_context_register(provider: ReviewContextProvider) -> ReviewContextProvider:
    """Register a provider once (re-imports do not add it twice). Usable as a decorator."""
    key = (provider.__module__, provider.__qualname__)
    review_context_providers[:] = [p for p in review_context_providers if (p.__module__, p.__qualname__) != key]
    review_context_providers.append(provider)
    return provider


def review_sections(request) -> list[dict]:
    """Every registered provider's sections for this request. A failing provider costs its own
    sections, not the reviewer's page."""
    sections: list[dict] = []
    for provider in review_context_providers:
        try:
            sections.extend(provider(request) or [])
        except Exception:  # noqa: BLE001 - the review page must still render
            logger.exception("review context provider %s failed for approval %s", provider, request.pk)
            sections.append({"title": "Unavailable", "html": "A section could not be loaded (see the logs)."})
    return sections
