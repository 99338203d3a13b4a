"""Tests of the whole-server benchmark's own parts: what it computes must be right to be trusted."""
