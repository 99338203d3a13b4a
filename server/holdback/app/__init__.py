"""The holdback server: Starlette HTTP + WebSocket around the sans-I/O core.

`settings` reads flags and `HOLDBACK_*` variables; `auth` decides who is asking; `pipeline`
runs one reply (pseudonymize, store, call the model, filter per channel); `sender` frames and
sends, coalescing deltas for a slow client; `ws` and `http_api` are the routes; `application`
wires them into an app; `commands` is the CLI (`holdback serve`, `user add`, `token create`,
`demo`).
"""
