"""The paper's equations and the scheduler logic: pure functions, no I/O, no clock.

Both engines (flow simulator and emulated router) import from here; every equation
lives in exactly one function named after what it computes.
"""
