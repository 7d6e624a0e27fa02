"""Value flow: weight-dtype expressions recognised, a value followed one step into callees and from callers."""
