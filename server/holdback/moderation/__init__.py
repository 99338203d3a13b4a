"""Policy moderation of reply text on sentence windows (issue 19): see `base.py`."""
