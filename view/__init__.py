"""`lora-sched view`: a timeline of every request of a trace or counterexample, as HTML or PNG."""
