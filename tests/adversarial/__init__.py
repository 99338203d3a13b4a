"""Adversarial corpus: what the browser shows is what the guard screened (issue #13)."""
