"""Search strategies: which points of a Space to measure next.

All three share one interface, ``next_batch(n, measured) -> [point]``, where ``measured``
maps every point already tried (``space.freeze(point)``) to its cost in seconds (inf when
it failed or was wrong); a strategy never proposes a point twice, and the default point
always comes first. Seeded: the same seed and the same costs give the same proposals.

* ``exhaustive``: the space in declaration order (small spaces).
* ``random``: a seeded permutation.
* ``model``: Bayesian optimisation with a Gaussian-process cost model. Why a GP and not
  xgboost (AutoTVM/MetaSchedule's choice): a template rule's space is a handful of ordinal
  knobs and the budget is tens of measurements, not thousands; a GP is accurate from a few
  points, gives an uncertainty that expected improvement turns into exploration, needs only
  numpy, and is deterministic. xgboost's trees need hundreds of samples to beat it. The
  model fits log-time on knob features normalised to [0, 1] (RBF kernel, length scale by
  marginal likelihood over a grid); candidates are every unmeasured point when the space
  has at most ``EXHAUSTIVE_SCORING`` points, else an evolutionary pool (one-step mutations
  of the best points plus random points); a batch is picked one point at a time by expected
  improvement, each pick entered as a "constant liar" (its predicted cost) before the next.
"""
from __future__ import annotations

import math

import numpy as np

from opgen.tune.space import Space, freeze

EXHAUSTIVE_SCORING = 20000
STRATEGIES = ("exhaustive", "random", "model")


class Exhaustive:
    def __init__(self, space: Space, seed: int = 0):
        self.space = space
        self.order = list(space.points)

    def next_batch(self, n: int, measured: dict) -> list[dict]:
        return [p for p in self.order if freeze(p) not in measured][:n]


class Random(Exhaustive):
    def __init__(self, space: Space, seed: int = 0):
        super().__init__(space, seed)
        rest = self.order[1:]
        np.random.default_rng(seed).shuffle(rest)
        self.order = [self.order[0]] + rest


def _rbf(a: np.ndarray, b: np.ndarray, length: float) -> np.ndarray:
    d2 = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
    return np.exp(-0.5 * d2 / (length * length))


class GaussianProcess:
    """Zero-mean GP on standardised targets; isotropic RBF. Length scale and noise level
    are chosen by marginal likelihood over a grid: on a noisy machine the model learns that
    close timings are noise instead of chasing them."""

    LENGTHS = (0.08, 0.15, 0.3, 0.6, 1.2)
    NOISES = (1e-3, 1e-2, 0.1, 0.5)

    def fit(self, x: np.ndarray, y: np.ndarray) -> "GaussianProcess":
        self.mu, self.sd = float(y.mean()), float(y.std()) or 1.0
        self.x, z = x, (y - self.mu) / self.sd
        best = None
        for length in self.LENGTHS:
            base = _rbf(x, x, length)
            for noise in self.NOISES:
                chol = np.linalg.cholesky(base + (noise + 1e-9) * np.eye(len(x)))
                alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, z))
                evidence = -0.5 * z @ alpha - np.log(np.diag(chol)).sum()
                if best is None or evidence > best[0]:
                    best = (evidence, length, noise, chol, alpha)
        _, self.length, self.noise, self.chol, self.alpha = best
        return self

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and standard deviation of the latent cost (without the timing noise)."""
        ks = _rbf(x, self.x, self.length)
        mean = ks @ self.alpha
        v = np.linalg.solve(self.chol, ks.T)
        var = np.clip(1.0 - (v * v).sum(0), 1e-12, None)
        return mean * self.sd + self.mu, np.sqrt(var) * self.sd


def expected_improvement(mean, std, best: float) -> np.ndarray:
    """EI of minimising: E[max(best - f, 0)] for f ~ N(mean, std^2)."""
    z = (best - mean) / std
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0)))
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    return (best - mean) * cdf + std * pdf


class ModelGuided:
    """GP + expected improvement; ``initial`` seeded random points before the model.

    Features of every point are computed once; the GP trains on at most ``MAX_TRAIN``
    points (the fastest ones: the region that matters), so a batch costs milliseconds.
    """

    MAX_TRAIN = 160

    def __init__(self, space: Space, seed: int = 0, initial: int = 3):
        self.space = space
        self.rng = np.random.default_rng(seed)
        self.initial = initial
        self.keys = [freeze(p) for p in space.points]
        self.index = {k: i for i, k in enumerate(self.keys)}
        feats = np.stack([space.features(p) for p in space.points]) if space.knobs else np.zeros((1, 0))
        span = np.ptp(feats, 0)
        self.x = (feats - feats.min(0)) / np.where(span > 0, span, 1.0)

    def _unmeasured(self, measured: dict) -> np.ndarray:
        return np.array([i for i, k in enumerate(self.keys) if k not in measured], dtype=int)

    def _random_unmeasured(self, n: int, measured: dict) -> list[dict]:
        todo = self._unmeasured(measured)
        return [self.space.points[i] for i in self.rng.permutation(todo)[:n]]

    def _pool(self, measured: dict, ranked: list) -> np.ndarray:
        if len(self.keys) <= EXHAUSTIVE_SCORING:
            return self._unmeasured(measured)
        pool = {self.index[freeze(q)] for k in ranked[:16] for q in self.space.neighbours(dict(k))}
        pool |= {self.index[freeze(p)] for p in self._random_unmeasured(512, measured)}
        return np.array(sorted(i for i in pool if self.keys[i] not in measured), dtype=int)

    def next_batch(self, n: int, measured: dict) -> list[dict]:
        default = self.space.default
        if freeze(default) not in measured:
            return [default] + self._random_unmeasured(n - 1, {**measured, freeze(default): 0})
        finite = {k: v for k, v in measured.items() if math.isfinite(v)}
        if len(finite) < self.initial or not self.space.knobs:
            return self._random_unmeasured(n, measured)
        worst = max(finite.values())
        costs = {k: (v if math.isfinite(v) else 2 * worst) for k, v in measured.items() if k in self.index}
        ranked = sorted(finite, key=finite.get)
        pool = list(self._pool(measured, ranked))
        best, batch = None, []
        while pool and len(batch) < n:
            train = sorted(costs, key=costs.get)[:self.MAX_TRAIN]
            train_x = self.x[[self.index[k] for k in train]]
            gp = GaussianProcess().fit(train_x, np.log([costs[k] for k in train]))
            if best is None:   # the incumbent: the model's best measured point (noise-aware)
                best = float(gp.predict(train_x)[0].min())
            mean, std = gp.predict(self.x[pool])
            ei = expected_improvement(mean, std, best)
            j = int(np.lexsort((self.rng.random(len(pool)), -ei))[0])  # ties broken by the seed
            # Constant liar: pretend the pick costs what the model predicts, so the next
            # pick of the same batch looks elsewhere instead of next door.
            costs[self.keys[pool[j]]] = float(np.exp(mean[j]))
            batch.append(self.space.points[pool.pop(j)])
        return batch


def make(name: str, space: Space, seed: int = 0):
    classes = {"exhaustive": Exhaustive, "random": Random, "model": ModelGuided}
    if name not in classes:
        raise ValueError(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}")
    return classes[name](space, seed)


def simulate(name: str, space: Space, cost, budget: int, seed: int = 0, batch: int = 4,
             until: float | None = None) -> list[float]:
    """Replay a strategy against a known cost function (point -> seconds, inf: failed).

    Returns the costs in the order the strategy measured them (stopping once one is
    <= ``until``): the search without builds or timings, for comparing strategies on
    recorded or synthetic spaces.
    """
    strategy = make(name, space, seed)
    measured: dict = {}
    order: list[float] = []
    while len(order) < min(budget, len(space.points)):
        points = strategy.next_batch(min(batch, budget - len(order)), measured)
        if not points:
            break
        for point in points:
            measured[freeze(point)] = cost(point)
            order.append(measured[freeze(point)])
            if until is not None and order[-1] <= until:
                return order
    return order
