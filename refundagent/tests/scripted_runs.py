"""Running the agent loop on a ticket with a scripted model, and reading back what the runtime
answered each tool call: the helpers of the tests that try the boundary with a model that writes
whatever it likes (test_agent_boundary, test_agent_amounts)."""

import json

from refundagent.agent.loop import agent_run_ticket
from refundagent.agent.providers.scripted import ScriptedProvider


def run(ticket, turns):
    agent_run = agent_run_ticket(ticket_id=ticket.pk, provider=ScriptedProvider(turns))
    ticket.refresh_from_db()
    return ticket, agent_run


def answers(agent_run) -> list[dict]:
    return [
        json.loads(block["content"])
        for message in agent_run.messages
        if message["role"] == "user"
        for block in message["content"]
        if block["type"] == "tool_result"
    ]
