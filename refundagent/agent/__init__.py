"""The agent: the durable, budgeted loop (loop.py), the tools and their authorization (tools.py)
and the LLM providers behind one interface (providers/)."""
