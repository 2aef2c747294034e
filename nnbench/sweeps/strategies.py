"""Search strategies: which cases of a shape a sweep evaluates, and in what order, under a budget.

A strategy sees one shape's candidates (the cases that remain after restrictions, the variants'
rules and the device's documented limits, so nothing it proposes is refused for a reason known
before compiling) and proposes them a batch at a time; the sweep compiles each batch in parallel
while the previous batch runs, and tells the strategy each result (the median in ms, or None for
a case that failed, faulted or was refused after compiling).

- `brute_force` (the default): every candidate, in the config's order.
- `random`: a seeded permutation of the candidates, cut at the budget.
- `tpe`: optuna's Tree-structured Parzen Estimator over the variant (categorical) and each
  variant's parameters (ordered: the index of the value among the candidates' values). A proposal
  that is not a candidate, or was evaluated already, is replaced by the nearest unevaluated
  candidate of the same variant (a restriction or a rule excluded it), and the study learns the
  point actually measured.
- `tpe_halving`: successive halving over the variants, then TPE inside the survivor. Each variant
  is an arm; the case budget is cut into rounds of equal size, and each round spends its share
  evenly over the arms still in play, then keeps the better half of them (ranked by the fastest
  case each has found), until one is left; it gets the last round, and what remains of the budget
  goes to the arms in that order. Inside an arm the cases come from the arm's own TPE study (its
  first few at random), except that whenever the fastest case so far (the incumbent) is another
  arm's, the arm's next case is first the analogue of the incumbent: its own case nearest in the
  parameters both share (a tile shape that wins in one step of a ladder is the first to try in the
  next), once per incumbent. A space of variants that differ by a large factor, whose best case is one
  tile of one variant, is where plain TPE's smoothed categorical keeps paying for the slow ones.

Budgets are per shape: `cases` evaluations (cases timed; a case refused after compiling does not
count), or `seconds` of the shape's run phase. A resumed sweep tells the strategy every result
already in the file first, counts them against the budget, and goes on with the same seed.
"""

from __future__ import annotations

import random as _random
import warnings
from dataclasses import dataclass

from nnbench.errors import NnbenchError

STRATEGIES = ("brute_force", "random", "tpe", "tpe_halving")
BUDGET_KEYS = ("cases", "seconds")
TPE_STARTUP = 10  # random proposals before the Parzen estimators take over (optuna's default)
HALVING_KEEP = 2  # tpe_halving keeps the better half of its arms after each round (successive halving's eta)
ARM_STARTUP = 4  # an arm's random proposals before its own Parzen estimators take over


@dataclass(frozen=True)
class Budget:
    cases: int | None = None
    seconds: float | None = None

    def __str__(self) -> str:
        parts = ([f"{self.cases} cases"] if self.cases else []) + ([f"{self.seconds:g} s"] if self.seconds else [])
        return " or ".join(parts) + " per shape" if parts else "none"


class Search:
    """One shape's search. `candidates` are opaque (the sweep's Cases); `coords(c)` gives a
    candidate's (group, {axis: value}) for model-based strategies."""

    adaptive = False  # whether a proposal depends on earlier results (else the sweep asks for all at once)

    def __init__(self, candidates: list, seed: int) -> None:
        self.candidates = list(candidates)
        self.seed = seed
        self.results: dict[int, float | None] = {}  # candidate index -> median ms (None: failed)
        self.pending: set[int] = set()

    @property
    def evaluated(self) -> int:
        return len(self.results)

    def left(self) -> int:
        return len(self.candidates) - len(self.results) - len(self.pending)

    def ask(self, n: int) -> list[int]:
        """Up to n candidate indices, neither evaluated nor pending."""
        raise NotImplementedError

    def tell(self, index: int, value: float | None) -> None:
        self.pending.discard(index)
        self.results[index] = value

    def forget(self, index: int) -> None:
        """A proposal that was not evaluated after all (refused after compiling): it does not count."""
        self.pending.discard(index)
        self.results[index] = None

    def best(self) -> tuple[int, float] | None:
        done = [(i, v) for i, v in self.results.items() if v is not None]
        return min(done, key=lambda iv: iv[1]) if done else None


class BruteForce(Search):
    def ask(self, n: int) -> list[int]:
        out = [i for i in range(len(self.candidates)) if i not in self.results and i not in self.pending][:n]
        self.pending.update(out)
        return out


class RandomSearch(Search):
    def __init__(self, candidates: list, seed: int) -> None:
        super().__init__(candidates, seed)
        self.order = list(range(len(self.candidates)))
        _random.Random(seed).shuffle(self.order)

    def ask(self, n: int) -> list[int]:
        out = [i for i in self.order if i not in self.results and i not in self.pending][:n]
        self.pending.update(out)
        return out


class TpeSearch(Search):
    """optuna's TPE through its ask-and-tell interface; see the module doc for the projection."""

    adaptive = True

    def __init__(self, candidates: list, seed: int, coords, startup: int = TPE_STARTUP) -> None:
        super().__init__(candidates, seed)
        optuna = _optuna()
        self.coords = [coords(c) for c in self.candidates]
        # A parameter's values across every group: same-named parameters mean the same thing along a
        # ladder (BM is the block tile's rows in steps 6, 7 and 8), so what is learnt on one step
        # carries to the others.
        self.groups = list(dict.fromkeys(g for g, _ in self.coords))
        self.values = {k: sorted({v for _, point in self.coords for kk, v in point.items() if kk == k})
                       for k in dict.fromkeys(k for _, point in self.coords for k in point)}
        self.group_axes = {g: [k for k in self.values if any(gg == g and k in p for gg, p in self.coords)
                               and len({p[k] for gg, p in self.coords if gg == g}) > 1] for g in self.groups}
        D = optuna.distributions
        self.dists = {"variant": D.CategoricalDistribution(self.groups)}
        self.dists.update({k: D.IntDistribution(0, len(vs) - 1) for k, vs in self.values.items() if len(vs) > 1})
        # multivariate and group: optuna's advice for a space whose parameters depend on a choice;
        # constant_liar: a batch's proposals that are still running count as bad, so a batch spreads out.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # `group` is marked experimental
            sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, multivariate=True,
                                                 group=True, constant_liar=True)
        self.study = optuna.create_study(sampler=sampler, direction="minimize")
        self.trials: dict[int, object] = {}  # candidate index -> its pending trial

    def _encode(self, index: int) -> dict[str, object]:
        group, point = self.coords[index]
        out: dict[str, object] = {"variant": group}
        for k in self.group_axes[group]:
            out[k] = self.values[k].index(point[k])
        return out

    def _nearest(self, group: str, wanted: dict[str, int], taken: set[int]) -> int | None:
        best, best_d = None, None
        for i, (g, point) in enumerate(self.coords):
            if i in taken:
                continue
            d = (0 if g == group else 1_000_000) + sum(abs(self.values[k].index(point[k]) - w)
                                                        for k, w in wanted.items() if k in point)
            if best_d is None or d < best_d:
                best, best_d = i, d
        return best

    def ask(self, n: int) -> list[int]:
        optuna = _optuna()
        out: list[int] = []
        while len(out) < n and self.left() > 0:
            trial = self.study.ask()
            group = trial.suggest_categorical("variant", self.groups)
            wanted = {k: trial.suggest_int(k, 0, len(self.values[k]) - 1) for k in self.group_axes[group]}
            taken = set(self.results) | self.pending
            index = self._nearest(group, wanted, taken)
            if index is None:
                self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
                break
            if self._encode(index) == dict(trial.params):
                self.trials[index] = trial  # the proposal itself: its trial stays running (constant liar)
            else:
                # Not a candidate: the trial is dropped and the point measured is added when its result comes.
                self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            self.pending.add(index)
            out.append(index)
        return out

    def tell(self, index: int, value: float | None) -> None:
        super().tell(index, value)
        optuna = _optuna()
        trial = self.trials.pop(index, None)
        state = optuna.trial.TrialState.COMPLETE if value is not None else optuna.trial.TrialState.FAIL
        if trial is not None:
            self.study.tell(trial, value, state=state)
        elif value is not None:
            params = self._encode(index)
            self.study.add_trial(optuna.trial.create_trial(
                params=params, distributions={k: self.dists[k] for k in params}, value=value))

    def forget(self, index: int) -> None:
        trial = self.trials.pop(index, None)
        if trial is not None:
            self.study.tell(trial, state=_optuna().trial.TrialState.FAIL)
        super().forget(index)


class HalvingSearch(Search):
    """Successive halving over the variants (arms), TPE inside each; see the module doc.

    The schedule is cumulative (after round r every arm still in play has had `quota[r]` results), so
    cases already in a resumed file count where they belong. Without a case budget (`seconds`) the
    schedule assumes the whole space: it then explores longer before it commits."""

    adaptive = True

    def __init__(self, candidates: list, seed: int, coords, budget_cases: int | None = None) -> None:
        super().__init__(candidates, seed)
        groups = [coords(c)[0] for c in self.candidates]
        self.arms = list(dict.fromkeys(groups))
        self.members = {a: [i for i, g in enumerate(groups) if g == a] for a in self.arms}
        self.inner = {a: TpeSearch([self.candidates[i] for i in self.members[a]], seed * 31 + k, coords,
                                   startup=ARM_STARTUP) for k, a in enumerate(self.arms)}
        self.where = {i: (a, k) for a in self.arms for k, i in enumerate(self.members[a])}
        self.points = [coords(c)[1] for c in self.candidates]
        self.values = {k: sorted({p[k] for p in self.points if k in p}) for k in {k for p in self.points for k in p}}
        self.carried: set[tuple[str, int]] = set()  # (arm, incumbent) pairs whose analogue was proposed
        # Rounds: every arm, then the better half, ..., then one; each round gets an equal share.
        sizes = [len(self.arms)]
        while sizes[-1] > 1:
            sizes.append(-(-sizes[-1] // HALVING_KEEP))
        share = (budget_cases or len(self.candidates)) / len(sizes)
        self.quota, total = [], 0.0
        for n in sizes:
            total += share / n
            self.quota.append(max(1, round(total)))
        self.sizes = sizes
        self.round = 0
        self.alive = list(self.arms)

    def _best(self, arm: str) -> float:
        found = self.inner[arm].best()
        return found[1] if found else float("inf")

    def _count(self, arm: str) -> int:
        return self.inner[arm].evaluated + len(self.inner[arm].pending)

    def _advance(self) -> None:
        """Next round once every arm in play has its quota (or nothing left to give)."""
        while self.round < len(self.sizes) - 1 and all(
                self._count(a) >= self.quota[self.round] or self.inner[a].left() == 0 for a in self.alive):
            if any(self.inner[a].pending for a in self.alive):
                return  # the round's last results are still running
            self.round += 1
            self.alive = sorted(self.alive, key=self._best)[:self.sizes[self.round]]

    def ask(self, n: int) -> list[int]:
        for i in self.pending:  # one the sweep runs without asking (the baseline) is not the arm's to propose
            arm, k = self.where[i]
            if k not in self.inner[arm].results:
                self.inner[arm].pending.add(k)
        out: list[int] = []
        while len(out) < n and self.left() > 0:
            self._advance()
            last = self.round == len(self.sizes) - 1
            if last:  # the survivor, then the others by their best, until the budget ends
                order = self.alive + sorted((a for a in self.arms if a not in self.alive), key=self._best)
                arm = next(a for a in order if self.inner[a].left() > 0)
            else:
                short = [a for a in self.alive if self._count(a) < self.quota[self.round] and self.inner[a].left() > 0]
                if not short:
                    break  # this round's results decide the next: the batch ends here
                arm = min(short, key=self._count)  # the round's cases spread over its arms
            k = self._analogue(arm)
            if k is None:
                got = self.inner[arm].ask(1)
                if not got:
                    break
                k = got[0]
            i = self.members[arm][k]
            self.pending.add(i)
            out.append(i)
        return out

    def _analogue(self, arm: str) -> int | None:
        """The arm's case nearest to the incumbent (the fastest case found so far, in another arm),
        once per incumbent: the distance counts, over the parameters both have, how many values
        apart they are (same-named parameters mean the same along a ladder: a tile shape that wins
        in one step is the first one to try in the next). None if the incumbent is the arm's own,
        or its analogue was measured already."""
        best = self.best()
        if best is None or self.where[best[0]][0] == arm or (arm, best[0]) in self.carried:
            return None
        self.carried.add((arm, best[0]))
        inner, want = self.inner[arm], self.points[best[0]]
        taken = set(inner.results) | inner.pending

        def distance(k: int) -> int:
            mine = self.points[self.members[arm][k]]
            return sum(abs(self.values[a].index(mine[a]) - self.values[a].index(want[a])) for a in mine if a in want)

        free = [k for k in range(len(self.members[arm])) if k not in taken]
        if not free:
            return None
        k = min(free, key=distance)
        inner.pending.add(k)  # its own study learns the result like any other (a point it did not ask)
        return k

    def tell(self, index: int, value: float | None) -> None:
        super().tell(index, value)
        arm, k = self.where[index]
        self.inner[arm].pending.add(k)  # a baseline or a resumed case reaches the arm without its ask
        self.inner[arm].tell(k, value)

    def forget(self, index: int) -> None:
        super().forget(index)
        arm, k = self.where[index]
        self.inner[arm].forget(k)


def _optuna():
    try:
        import optuna
    except ImportError:
        raise NnbenchError("strategy tpe needs optuna: pip install -e '.[search]' (or pip install optuna)") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def available(name: str) -> str | None:
    """Why strategy `name` cannot run here (a missing library), or None."""
    if name in ("tpe", "tpe_halving"):
        try:
            _optuna()
        except NnbenchError as e:
            return str(e)
    return None


def make(name: str, candidates: list, seed: int, coords=None, budget_cases: int | None = None) -> Search:
    if name == "brute_force":
        return BruteForce(candidates, seed)
    if name == "random":
        return RandomSearch(candidates, seed)
    if name == "tpe":
        return TpeSearch(candidates, seed, coords)
    if name == "tpe_halving":
        return HalvingSearch(candidates, seed, coords, budget_cases)
    raise NnbenchError(f"strategy {name!r}: unknown; choose from {', '.join(STRATEGIES)}")
