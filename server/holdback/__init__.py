"""holdback: an LLM chat server whose model never sees, and whose wire never carries, secrets."""

__version__ = "0.1.0"
