"""How many evaluations each strategy needs, replayed on a measured space.

    python -m opgen.tune.replay DB.jsonl [--seeds 5] [--within 0.05]

Takes the ``ok`` template records of the database's largest key (run an exhaustive
``opgen tune ... --strategy exhaustive`` first), rebuilds the space from the recorded
points, and replays each strategy against the recorded median times for several seeds:
the evaluations until one lands within ``--within`` of the exhaustive best (median over
the seeds). No builds, no clocks: the same recorded costs for every strategy, so the
comparison is not at the mercy of a noisy machine (the costs themselves are).
"""
from __future__ import annotations

import argparse
import math
import statistics

import numpy as np

from opgen.schedules import Knob
from opgen.tune import database, strategies
from opgen.tune.space import Space, freeze


def recorded_space(records: list[dict]) -> tuple[Space, dict]:
    """A Space over the recorded points (domains in sorted order) and point -> cost."""
    costs = {}
    for r in records:
        costs.setdefault(freeze(r["knobs"]), []).append(r["median_ms"])
    costs = {k: min(v) for k, v in costs.items()}
    names = sorted({n for k in costs for n, _ in k})
    knobs = tuple(Knob(n, tuple(sorted({dict(k)[n] for k in costs}, key=str)), dict(records[0]["knobs"])[n])
                  for n in names)
    points = [dict(records[0]["knobs"])] + [dict(k) for k in costs if dict(k) != records[0]["knobs"]]
    return Space(None, knobs, tuple(points), 0), costs


def evaluations_to_reach(name: str, space: Space, costs: dict, within: float, seeds: int) -> list[float]:
    best = min(costs.values())
    needed = []
    for seed in range(seeds):
        order = strategies.simulate(name, space, lambda p: costs[freeze(p)], len(space.points), seed,
                                    until=best * (1 + within))
        hits = [i + 1 for i, c in enumerate(np.minimum.accumulate(order)) if c <= best * (1 + within)]
        needed.append(hits[0] if hits else math.inf)
    return needed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m opgen.tune.replay")
    parser.add_argument("db")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--within", type=float, default=0.05)
    args = parser.parse_args(argv)
    groups: dict = {}
    for r in database.load(args.db):
        if database.is_candidate(r):
            groups.setdefault(database.record_key(r), []).append(r)
    key, records = max(groups.items(), key=lambda kv: len({freeze(r["knobs"]) for r in kv[1]}))
    space, costs = recorded_space(records)
    print(f"{key[0]} {key[1]} {key[2]} bucket {key[4]}: {len(space.points)} measured points, best "
          f"{min(costs.values()):.3f} ms, default {costs[freeze(space.default)]:.3f} ms")
    for name in strategies.STRATEGIES:
        needed = evaluations_to_reach(name, space, costs, args.within, args.seeds)
        median = statistics.median(needed)
        print(f"{name:<11} evaluations to within {args.within:.0%}: median {median} "
              f"({median / len(space.points):.0%} of the space), per seed {needed}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
