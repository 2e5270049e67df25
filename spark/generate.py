"""Synthetic but realistic event logs for demos and benchmarks.

Days of traffic for all three services: a daily cycle (quiet at night UTC, busy in the afternoon), a
steady day-over-day growth, every mood and close reason, several app ids and nodes, periodic stats
lines, and optionally a few malformed lines. Lines are sorted by `ts` within each day, as a server
writes them. `python -m burrow.spark.generate --out DIR --events N` writes `DIR/<service>-<node>.jsonl`.
"""

from __future__ import annotations

import argparse
import bisect
import math
import os
import random
from collections import Counter
from dataclasses import dataclass, field

DAY = 86400.0
# Share of the session/connection events each type gets (stats lines come on top, one a minute).
TYPE_WEIGHTS = {("mailbox", "connection"): 0.30, ("mailbox", "mailbox"): 0.15, ("mailbox", "nameplate"): 0.15,
                ("transit", "session"): 0.15, ("relay", "connection"): 0.25}
MOODS = {
    ("mailbox", "mailbox"): {"happy": 0.80, "lonely": 0.08, "quiet": 0.03, "errory": 0.03, "scary": 0.01,
                             "pruney": 0.04, "crowded": 0.01},
    ("mailbox", "nameplate"): {"happy": 0.85, "lonely": 0.10, "pruney": 0.04, "crowded": 0.01},
    ("transit", "session"): {"happy": 0.85, "lonely": 0.07, "errory": 0.02, "jilted": 0.02, "redundant": 0.02,
                             "impatient": 0.01, "empty": 0.01},
    ("relay", "connection"): {"client": 0.85, "timeout": 0.08, "protocol": 0.02, "denied": 0.01,
                              "duplicate": 0.01, "limit": 0.01, "shutdown": 0.02},
    ("mailbox", "connection"): {"client": 0.93, "timeout": 0.04, "protocol": 0.01, "limit": 0.01, "shutdown": 0.01},
}
APP_IDS = {"lothar.com/wormhole/text-or-file-xfer": 0.88, "tahoe-lafs.org/invite/v1": 0.07,
           "example.org/chat": 0.05}
MALFORMED = ['{"v":1,"ts":17', "not json at all", '{"v":1,"ts":"yesterday","service":"relay"}', "[1,2,3]",
             '{"v":1,"ts":1.0,"service":"mailbox","event":"teleport","node":"x"}']


@dataclass
class Generated:
    files: list[str] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)  # (service, event) -> lines
    moods: Counter = field(default_factory=Counter)  # (service, event, mood or close_reason) -> sessions
    bytes: Counter = field(default_factory=Counter)  # service -> relayed bytes (see spark/load.py)
    malformed: int = 0
    unknown_version: int = 0


def _picker(weights: dict, rnd: random.Random):
    keys = list(weights)
    cum = list(_cumulate([weights[k] for k in keys]))
    total = cum[-1]
    return lambda: keys[bisect.bisect_right(cum, rnd.random() * total)]


def _cumulate(values):
    acc = 0.0
    for v in values:
        acc += v
        yield acc


def _minute_cdf() -> list[float]:
    """Traffic by minute of day: 25% of the peak at 04:00 UTC, the peak at 16:00 UTC."""
    shape = [0.25 + 0.75 * (0.5 - 0.5 * math.cos(2 * math.pi * (m / 60.0 - 4.0) / 24.0)) for m in range(1440)]
    return list(_cumulate(shape))


def _f(x: float) -> str:
    return repr(round(x, 6))


def _n(x) -> str:
    return "null" if x is None else _f(x)


def generate(out_dir: str, events: int = 100_000, days: int = 7, start: float = 1_767_225_600.0,
             growth: float = 0.03, nodes: int = 2, seed: int = 7, malformed: int = 0,
             unknown_version: int = 0, stats: bool = True) -> Generated:
    """Write about `events` session/connection lines (+ stats lines) spread over `days` from `start`."""
    rnd = random.Random(seed)
    os.makedirs(out_dir, exist_ok=True)
    gen = Generated()
    weights = [(1.0 + growth) ** d for d in range(days)]
    per_day = [round(events * w / sum(weights)) for w in weights]
    cdf = _minute_cdf()
    pick_type = _picker(TYPE_WEIGHTS, rnd)
    pick_mood = {k: _picker(v, rnd) for k, v in MOODS.items()}
    pick_app = _picker(APP_IDS, rnd)
    node_names = [f"node-{i}" for i in range(nodes)]
    handles = {}
    for svc in ("mailbox", "transit", "relay"):
        for node in node_names:
            path = os.path.join(out_dir, f"{svc}-{node}.jsonl")
            handles[(svc, node)] = open(path, "w", encoding="utf-8")
            gen.files.append(path)
    bad_left = malformed
    unknown_left = unknown_version
    try:
        for d in range(days):
            day0 = start + d * DAY
            lines: dict[tuple[str, str], list[tuple[float, str]]] = {k: [] for k in handles}
            for _ in range(per_day[d]):
                svc, ev = pick_type()
                node = node_names[int(rnd.random() * nodes)]
                minute = bisect.bisect_right(cdf, rnd.random() * cdf[-1])
                started = day0 + minute * 60.0 + rnd.random() * 60.0
                outcome = pick_mood[(svc, ev)]()
                body, duration = _body(svc, ev, outcome, started, rnd, pick_app, gen)
                ts = started + duration
                head = f'{{"v":1,"ts":{_f(ts)},"service":"{svc}","event":"{ev}","node":"{node}",'
                lines[(svc, node)].append((ts, head + body + "}"))
                gen.counts[(svc, ev)] += 1
                gen.moods[(svc, ev, outcome)] += 1
            if stats:
                for (svc, node), out in lines.items():
                    for m in range(1440):
                        ts = day0 + (m + 1) * 60.0
                        out.append((ts, _stats(svc, node, ts, (cdf[m] - (cdf[m - 1] if m else 0)), rnd)))
                        gen.counts[(svc, "stats")] += 1
            for key, out in lines.items():
                out.sort()
                fh = handles[key]
                for i, (_, line) in enumerate(out):
                    if bad_left and i % 997 == 500:
                        fh.write(MALFORMED[bad_left % len(MALFORMED)] + "\n")
                        bad_left -= 1
                        gen.malformed += 1
                    if unknown_left and i % 991 == 300:
                        fh.write(line.replace('{"v":1,', '{"v":2,', 1) + "\n")
                        unknown_left -= 1
                        gen.unknown_version += 1
                    fh.write(line + "\n")
    finally:
        for fh in handles.values():
            fh.close()
    return gen


def _size(rnd: random.Random, median: float, sigma: float) -> int:
    return int(math.exp(math.log(median) + sigma * rnd.gauss(0.0, 1.0)))


def _body(svc: str, ev: str, outcome: str, started: float, rnd: random.Random, pick_app, gen: Generated):
    if (svc, ev) == ("mailbox", "connection"):
        duration = min(_size(rnd, 20, 1.2), 3600) + rnd.random()
        return (f'"started":{_f(started)},"duration":{_f(duration)},"app_id":"{pick_app()}",'
                f'"client_impl":"python","client_version":"0.24.0","messages_in":{rnd.randint(3, 12)},'
                f'"errors":{1 if outcome == "protocol" else 0},"close_reason":"{outcome}"'), duration
    if (svc, ev) in (("mailbox", "mailbox"), ("mailbox", "nameplate")):
        duration = min(_size(rnd, 15, 1.0), 3600) + rnd.random()
        paired = outcome in ("happy", "scary", "errory", "crowded", "pruney") or rnd.random() < 0.3
        waiting = _f(min(rnd.expovariate(1 / 8.0), duration)) if paired and outcome != "lonely" else "null"
        head = f'"app_id":"{pick_app()}","started":{_f(started)},"duration":{_f(duration)},"waiting_time":{waiting},"mood":"{outcome}"'
        if ev == "nameplate":
            return head, duration
        sides = 2 if waiting != "null" else 1
        messages = rnd.randint(4, 10) if sides == 2 else rnd.randint(1, 2)
        size = messages * _size(rnd, 300, 0.6)
        gen.bytes["mailbox"] += size
        return (head + f',"for_nameplate":{"true" if rnd.random() < 0.97 else "false"},"sides":{sides},'
                f'"messages":{messages},"bytes":{size}'), duration
    if svc == "transit":
        paired = outcome not in ("lonely", "impatient")
        waiting = min(rnd.expovariate(1 / 3.0), 60.0) if paired else None
        duration = (waiting or 0.0) + (min(_size(rnd, 30, 1.5), 7200) if paired else rnd.uniform(30, 120))
        first = _size(rnd, 2_000_000, 2.0) if outcome == "happy" else 0
        second = _size(rnd, 2_000, 1.0) if outcome == "happy" else 0
        gen.bytes["transit"] += first + second
        transport = "tcp" if rnd.random() < 0.8 else ("websocket" if rnd.random() < 0.7 else "mixed")
        return (f'"started":{_f(started)},"duration":{_f(duration)},"waiting_time":{_n(waiting)},'
                f'"mood":"{outcome}","transport":"{transport}","bytes_from_first":{first},'
                f'"bytes_from_second":{second},"total_bytes":{first + second}'), duration
    duration = min(_size(rnd, 120, 1.5), 86400) + rnd.random()
    packets_in = _size(rnd, 200, 1.5)
    packets_out = _size(rnd, 200, 1.5)
    bytes_in = packets_in * rnd.randint(60, 1300)
    gen.bytes["relay"] += bytes_in
    drops = '{"queue_full":1}' if rnd.random() < 0.05 else "{}"
    return (f'"started":{_f(started)},"duration":{_f(duration)},'
            f'"protocol":"{"derp" if rnd.random() < 0.8 else "iroh"}",'
            f'"transport":"{"upgrade" if rnd.random() < 0.9 else "websocket"}","tls":true,'
            f'"home":{"true" if rnd.random() < 0.6 else "false"},"packets_in":{packets_in},'
            f'"packets_out":{packets_out},"bytes_in":{bytes_in},"bytes_out":{packets_out * rnd.randint(60, 1300)},'
            f'"drops":{drops},"close_reason":"{outcome}"'), duration


def _stats(svc: str, node: str, ts: float, load: float, rnd: random.Random) -> str:
    head = f'{{"v":1,"ts":{_f(ts)},"service":"{svc}","event":"stats","node":"{node}","interval":60.0,'
    k = int(load * 1e5)
    if svc == "mailbox":
        return head + f'"connections":{k},"mailboxes":{k // 2},"nameplates":{k // 3},"messages_interval":{k * 5}}}'
    if svc == "transit":
        return head + f'"pending":{k // 10},"active_pairs":{k // 4},"bytes_interval":{k * 10_000}}}'
    return (head + f'"clients":{k},"packets_interval":{k * 50},"bytes_interval":{k * 40_000},'
            f'"drops_interval":{{"queue_full":{rnd.randint(0, 3)}}},"stun_interval":{k // 2}}}')


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m burrow.spark.generate", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory for the .jsonl files")
    parser.add_argument("--events", type=int, default=100_000, help="session/connection events in total")
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--start", type=float, default=1_767_225_600.0, help="epoch seconds of the first day")
    parser.add_argument("--growth", type=float, default=0.03, help="day-over-day traffic growth (0.03 = 3%%)")
    parser.add_argument("--nodes", type=int, default=2, help="nodes per service")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--malformed", type=int, default=0, help="malformed lines to mix in")
    args = parser.parse_args()
    gen = generate(args.out, args.events, args.days, args.start, args.growth, args.nodes, args.seed, args.malformed)
    print(f"wrote {sum(gen.counts.values()) + gen.malformed} lines to {len(gen.files)} files in {args.out}")


if __name__ == "__main__":
    main()
