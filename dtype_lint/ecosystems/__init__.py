"""Ecosystem families: each folder knows one kind of project (its layers, its quantizers, its words)."""
