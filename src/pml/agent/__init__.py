"""Agent mode (SPEC §13): an OpenAI-compatible model as the executor inside PML's pipeline."""
