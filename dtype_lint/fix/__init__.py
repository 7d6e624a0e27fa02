"""From a finding to verified edits: the planner, import edits, the fixer, the scope check, the
helper template and where it lives."""
