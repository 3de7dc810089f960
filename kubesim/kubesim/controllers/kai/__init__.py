"""KAI Scheduler inside kubesim: queues with fair share, the podgrouper, the scheduler's actions
(allocate, reclaim, preempt), the binder with GPU fractions, and KAI's admission webhooks."""
