"""Placeholder until the inbound lands."""


def zendesk_inbound_process(*, inbound_id: int):
    raise NotImplementedError
