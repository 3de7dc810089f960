"""Volcano inside kubesim: the vcjob controller and the scheduler's gang session."""
