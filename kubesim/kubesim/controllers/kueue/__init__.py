"""Kueue inside kubesim: the Job and pod integrations, the workload controller, the scheduler
and its admission arithmetic."""
