"""Ecosystems as plug-ins: one folder per ecosystem (hf/, vllm/) holding what names its backends,
quantizers, helper and conventions; presets.py holds every preset. See docs/architecture.md."""
