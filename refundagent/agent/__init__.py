"""The agent: the durable, budgeted loop (loop.py), the tools behind the policy gate (tools.py)
and the LLM providers behind one interface (providers/)."""
