"""The shaping side of an emulated mount: the shaper that delays each request by the model's
answer, the precise timer, the wiring to a running server, loop load and the metrics export."""
