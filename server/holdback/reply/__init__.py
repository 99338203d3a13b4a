"""A reply on its way out: typed frames, and the sans-I/O machine that alone produces them."""

from holdback.reply.frames import Frame, finish_reason
from holdback.reply.machine import Outcome, ReplyMachine, ReplyState

__all__ = ["Frame", "Outcome", "ReplyMachine", "ReplyState", "finish_reason"]
