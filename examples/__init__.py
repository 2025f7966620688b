"""The catalogue of vLLM Scheduler subclasses with one plausible change each (not installed)."""
