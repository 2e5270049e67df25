"""Connection caps shared by the servers: a total cap and a per-IP cap, O(1) per check."""

from __future__ import annotations


class ConnectionCaps:
    """Counts live connections, in total and per source address.

    `try_acquire(ip)` returns None when admitted, else the reason ("total" or "per_ip"), so the
    caller can send a clear error and count the refusal. Every admitted connection must `release`.
    A limit of 0 means unlimited.
    """

    def __init__(self, max_total: int = 0, max_per_ip: int = 0) -> None:
        self.max_total = max_total
        self.max_per_ip = max_per_ip
        self.total = 0
        self._per_ip: dict[str, int] = {}

    def try_acquire(self, ip: str) -> str | None:
        if self.max_total and self.total >= self.max_total:
            return "total"
        held = self._per_ip.get(ip, 0)
        if self.max_per_ip and held >= self.max_per_ip:
            return "per_ip"
        self._per_ip[ip] = held + 1
        self.total += 1
        return None

    def release(self, ip: str) -> None:
        held = self._per_ip.get(ip, 0)
        if held <= 1:
            self._per_ip.pop(ip, None)
        else:
            self._per_ip[ip] = held - 1
        self.total = max(0, self.total - 1)

    def held_by(self, ip: str) -> int:
        return self._per_ip.get(ip, 0)


class TokenBucket:
    """A byte- or request-rate limiter: `rate` units per second, bursts up to `burst`.

    The clock is an argument so the protocol cores stay sans-IO.
    """

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.stamp = now

    def take(self, amount: float, now: float) -> bool:
        elapsed = now - self.stamp
        if elapsed > 0:
            self.tokens = min(self.burst, self.tokens + elapsed * self.rate)
            self.stamp = now
        if self.tokens >= amount:
            self.tokens -= amount
            return True
        return False
