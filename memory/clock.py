"""Epoch-millisecond time, the unit of every *_ms field. One place so tests can move the clock."""

import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000
