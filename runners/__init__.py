"""Engines that run a target with a speculative config and capture per-step acceptance."""
