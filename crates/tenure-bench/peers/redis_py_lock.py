"""redis-py's asyncio Lock as a peer in tenure's benchmark (`scripts/bench`).

Modes (one JSON object on stdout):
  distinct URL TASKS SECONDS    TASKS tasks, each acquire + release on its own key
  sequential URL CYCLES         CYCLES acquire + release on distinct keys, one task
  contended URL TASKS SECONDS   TASKS tasks on one key with blocking acquire
                                (redis-py's default 0.1 s polling sleep)
"""

import asyncio
import json
import sys
import time

from redis.asyncio import Redis

TTL = 10  # seconds, like the other peers' leases


async def distinct(r, tasks, seconds):
    stop = time.monotonic() + seconds
    done = 0

    async def run(i):
        nonlocal done
        lock = r.lock(f"py:distinct:{i}", timeout=TTL)
        while time.monotonic() < stop:
            await lock.acquire(blocking=False)
            await lock.release()
            done += 1

    await asyncio.gather(*(run(i) for i in range(tasks)))
    return {"cycles_per_sec": done / seconds}


async def sequential(r, cycles):
    for i in range(cycles):
        lock = r.lock(f"py:seq:{i}", timeout=TTL)
        await lock.acquire(blocking=False)
        await lock.release()
    return {"cycles": cycles}


async def contended(r, tasks, seconds):
    stop = time.monotonic() + seconds
    state = {"last": None, "handoffs": 0, "cycles": 0, "worst": 0.0, "first": 0.0}

    async def run(i):
        lock = r.lock("py:contended", timeout=TTL)
        which = "first"
        while time.monotonic() < stop:
            asked = time.monotonic()
            await lock.acquire(blocking=True)
            state[which] = max(state[which], time.monotonic() - asked)
            which = "worst"
            state["cycles"] += 1
            if state["last"] != i:
                state["handoffs"] += 1
                state["last"] = i
            await lock.release()
            await asyncio.sleep(0.001)

    await asyncio.gather(*(run(i) for i in range(tasks)))
    return {
        "handoffs_per_sec": state["handoffs"] / seconds,
        "cycles": state["cycles"],
        "worst_wait_ms": state["worst"] * 1000,
        "first_wait_ms": state["first"] * 1000,
    }


async def main(argv):
    mode, url = argv[1], argv[2]
    r = Redis.from_url(url, max_connections=1024)
    try:
        if mode == "distinct":
            out = await distinct(r, int(argv[3]), float(argv[4]))
        elif mode == "sequential":
            out = await sequential(r, int(argv[3]))
        elif mode == "contended":
            out = await contended(r, int(argv[3]), float(argv[4]))
        else:
            raise SystemExit(f"unknown mode {mode!r}")
    finally:
        await r.aclose()
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main(sys.argv))
