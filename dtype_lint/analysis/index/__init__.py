"""The class index: class headers across files, per-class facts, lazy exports."""
