"""The LLM providers behind one interface (`base.Provider`): anthropic, offline, scripted.
`registry.provider_get()` is the one place that picks one; the loop asks it."""
