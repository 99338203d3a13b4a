"""The whole-server benchmark: holdback against a bare relay, both fed by one paced upstream.

The rule this package keeps: every process in a measurement is real and on loopback (a fake
OpenAI-compatible upstream, the server under test, a WebSocket load generator), and every figure
is one this machine measured in the same run as the relay's figure it is compared with.
"""
