"""Rank tests of the regression gate (docs/PERF_GATE.md, "How it decides"): the two-sided
Mann-Whitney U test of one benchmark's repetitions, exact for small samples (with or without
ties) and asymptotic for large ones, and the stratified U test of a shift common to several
benchmarks.

Plain Python on purpose (no scipy or numpy): the exact null distributions are counted with
Python's integers, many counts packed side by side into one integer so that a shift-and-add or
one multiplication updates them all at once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

# Both samples together: up to this many repetitions the U test's null distribution is counted
# exactly, given the ties (about 0.2 s the first time at 100, cached for untied samples of the
# same sizes); above it, the normal approximation with tie and continuity corrections.
EXACT_MAX_REPETITIONS = 100
# The stratified test's exact convolution holds one count per value of its statistic, each as
# wide as the product of the benchmarks' arrangement counts: above this many bits it uses the
# normal approximation instead, which with that many values is close (16 benchmarks at 10
# repetitions a side need 0.9 Mbit, 0.06 s; at 20, 7.8 Mbit and 2 s, so they are approximated).
EXACT_MAX_STRATIFIED_BITS = 1 << 22

EXACT = "exact"
ASYMPTOTIC = "asymptotic"


@dataclass(frozen=True)
class UTest:
    """One benchmark's U test. The statistic is the candidate's (y's) U doubled, U2: twice the
    number of (baseline, candidate) pairs where the candidate is larger, ties counting half, so
    that it is an integer even with ties. Under "same distribution" its mean is n_x * n_y."""

    n_x: int
    n_y: int
    u2: int  # observed doubled U of the candidate
    u2_low: int  # the smallest and largest doubled U these values (their ties) allow
    u2_high: int
    variance2: float  # variance of u2 under the null, tie-corrected
    p_value: float  # two-sided
    min_p_value: float  # the smallest two-sided p-value any arrangement of these values gives
    method: str  # EXACT or ASYMPTOTIC
    counts: tuple = ()  # EXACT: arrangements giving u2_low, u2_low + 1, ..., u2_high
    total: int = 0  # EXACT: all arrangements, comb(n_x + n_y, n_y)

    @property
    def centre2(self) -> int:
        return self.n_x * self.n_y


@dataclass(frozen=True)
class StratifiedTest:
    """The stratified U test over several benchmarks: their U statistics, each scaled to weigh
    one benchmark as much as another, summed. Under "same distribution" in every benchmark the
    sum's null distribution is the convolution of theirs."""

    strata: int
    statistic: float  # mean over the benchmarks of U / (n_x n_y): the chance a candidate repetition is the larger
    p_value: float
    min_p_value: float
    method: str


def comb(n: int, k: int) -> int:
    """n choose k (math.comb is Python 3.8 and newer; the gate runs on 3.7)."""
    return math.factorial(n) // (math.factorial(k) * math.factorial(n - k))


def doubled_midranks(values: list) -> list:
    """Each value's rank among all, averaged over ties, times two (an integer), in the order given."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            ranks[order[position]] = (start + 1) + (end + 1)  # twice the mean of ranks start+1 .. end+1
        start = end + 1
    return ranks


@lru_cache(maxsize=512)
def rank_sum_counts(ranks: tuple, size: int) -> tuple:
    """How many of the comb(len(ranks), size) subsets of `size` ranks (doubled, sorted) have each
    doubled rank sum: (counts, lowest sum). Counted as the coefficients of the generating
    polynomial prod(1 + t z^r), one integer per power of t, its coefficients in fixed-width slots."""
    total_ranks = len(ranks)
    slot_bytes = (comb(total_ranks, total_ranks // 2).bit_length() + 7) // 8  # any partial count fits
    slot = 8 * slot_bytes
    polynomials = [1] + [0] * size
    for index, rank in enumerate(ranks):
        shift = slot * rank
        for chosen in range(min(index + 1, size), 0, -1):
            if polynomials[chosen - 1]:
                polynomials[chosen] += polynomials[chosen - 1] << shift
    lowest, highest = sum(ranks[:size]), sum(ranks[total_ranks - size:])
    data = polynomials[size].to_bytes((highest + 1) * slot_bytes, "little")
    counts = tuple(int.from_bytes(data[value * slot_bytes:(value + 1) * slot_bytes], "little")
                   for value in range(lowest, highest + 1))
    return counts, lowest


def two_sided_tail(counts, lowest: int, centre: int, distance: int) -> int:
    """The arrangements at least `distance` away from `centre`."""
    return sum(count for offset, count in enumerate(counts) if abs(lowest + offset - centre) >= distance)


def u_test(x: list, y: list, exact_max: int = EXACT_MAX_REPETITIONS) -> UTest:
    """The two-sided Mann-Whitney U test of baseline x against candidate y: exact (the
    permutation distribution of the ranks, ties as they are) when len(x) + len(y) <= exact_max,
    else the normal approximation with tie and continuity corrections."""
    n_x, n_y = len(x), len(y)
    if n_x == 0 or n_y == 0:
        raise ValueError("the U test needs values on both sides")
    n = n_x + n_y
    ranks = doubled_midranks(list(x) + list(y))
    u2 = sum(ranks[n_x:]) - n_y * (n_y + 1)
    by_size = sorted(ranks)
    # The candidate's doubled U is smallest when it holds the lowest ranks, largest with the highest.
    u2_low, u2_high = sum(by_size[:n_y]) - n_y * (n_y + 1), sum(by_size[n_x:]) - n_y * (n_y + 1)
    tie_term = 0
    start = 0
    while start < n:
        end = start
        while end + 1 < n and by_size[end + 1] == by_size[start]:
            end += 1
        tied = end - start + 1
        tie_term += tied**3 - tied
        start = end + 1
    variance2 = 4 * n_x * n_y / 12 * ((n + 1) - (tie_term / (n * (n - 1)) if n > 1 else 0))
    centre = n_x * n_y
    if n <= exact_max:
        total = comb(n, n_y)
        counted = min(n_x, n_y)  # count the smaller sample's subsets: the same distribution, less work
        sums, lowest_sum = rank_sum_counts(tuple(by_size), counted)
        doubled = list(sums)
        low = lowest_sum - counted * (counted + 1)  # that sample's doubled U
        if counted == n_y:
            counts, lowest = doubled, low
        else:  # the baseline's doubled U counted: the candidate's is 2 n_x n_y minus it
            counts, lowest = doubled[::-1], 2 * centre - (low + len(doubled) - 1)
        observed = abs(u2 - centre)
        p_value = two_sided_tail(counts, lowest, centre, observed) / total
        extreme = max(abs(u2_low - centre), abs(u2_high - centre))
        min_p_value = two_sided_tail(counts, lowest, centre, extreme) / total
        return UTest(n_x, n_y, u2, u2_low, u2_high, variance2, min(1.0, p_value), min(1.0, min_p_value), EXACT,
                     tuple(counts), total)
    p_value = normal_two_sided(abs(u2 - centre), variance2, 1.0)
    extreme = max(abs(u2_low - centre), abs(u2_high - centre))
    return UTest(n_x, n_y, u2, u2_low, u2_high, variance2, p_value, normal_two_sided(extreme, variance2, 1.0),
                 ASYMPTOTIC)


def normal_two_sided(distance: float, variance: float, continuity: float) -> float:
    """Two-sided normal tail of a statistic `distance` from its mean, less a continuity correction."""
    if variance <= 0:  # every value tied: no evidence of a difference
        return 1.0
    z = max(0.0, distance - continuity) / math.sqrt(variance)
    return min(1.0, math.erfc(z / math.sqrt(2)))


def asymptotic_p_value(x: list, y: list) -> float:
    """The normal approximation with tie and continuity corrections, whatever the sizes:
    scipy.stats.mannwhitneyu(x, y, method='asymptotic')."""
    return u_test(x, y, exact_max=0).p_value


def design_min_p_value(n_x: int, n_y: int) -> float:
    """The smallest two-sided p-value the U test can give with these sample sizes, without ties."""
    return _untied(n_x, n_y).min_p_value


@lru_cache(maxsize=256)
def _untied(n_x: int, n_y: int) -> UTest:
    return u_test(list(range(n_x)), list(range(n_x, n_x + n_y)))


def stratified_u_test(tests: list, exact_max_bits: int = EXACT_MAX_STRATIFIED_BITS,
                      min_p_only: bool = False) -> StratifiedTest:
    """The two-sided stratified U test of a shift common to every benchmark: T, the sum over the
    benchmarks of each one's doubled U scaled by L / (n_x n_y) (L the least common multiple of
    the n_x n_y, so that each weighs the same and T is an integer), against its null distribution:
    exact, the convolution of the benchmarks' exact distributions, where each is exact and the
    convolution is small enough; else the normal approximation (variance the sum of the scaled
    variances, continuity-corrected by half the smallest step). With min_p_only the p-value is
    not computed (nan): only the smallest one these values allow."""
    if not tests:
        raise ValueError("the stratified test needs at least one benchmark")
    scale = 1
    for test in tests:
        scale = scale * test.centre2 // math.gcd(scale, test.centre2)
    weights = [scale // test.centre2 for test in tests]
    centre = scale * len(tests)  # sum of the weighted means n_x n_y
    statistic = sum(weight * test.u2 for weight, test in zip(weights, tests))
    low = sum(weight * test.u2_low for weight, test in zip(weights, tests))
    high = sum(weight * test.u2_high for weight, test in zip(weights, tests))
    observed, extreme = abs(statistic - centre), max(centre - low, high - centre)
    mean_auc = sum(test.u2 / (2 * test.centre2) for test in tests) / len(tests)
    slot_bytes = (sum(test.total.bit_length() for test in tests) + 7) // 8
    values = 2 * centre + 1
    if all(test.method == EXACT for test in tests) and values * slot_bytes * 8 <= exact_max_bits:
        total = _product(test.total for test in tests)
        # T is at its most extreme only with every benchmark at its own extreme, the same way.
        if low == high:
            min_p_value = 1.0
        else:
            at_extreme = 0
            if centre - low == extreme:
                at_extreme += _product(test.counts[0] for test in tests)
            if high - centre == extreme:
                at_extreme += _product(test.counts[-1] for test in tests)
            min_p_value = at_extreme / total
        if min_p_only:
            return StratifiedTest(len(tests), mean_auc, math.nan, min(1.0, min_p_value), EXACT)
        factors = []
        for weight, test in zip(weights, tests):
            packed = bytearray((weight * test.u2_high + 1) * slot_bytes)
            for offset, count in enumerate(test.counts):
                position = weight * (test.u2_low + offset) * slot_bytes
                packed[position:position + slot_bytes] = count.to_bytes(slot_bytes, "little")
            factors.append(int.from_bytes(packed, "little"))
        while len(factors) > 1:  # pairwise: multiplying numbers of like size is the cheapest order
            factors = [factors[i] * factors[i + 1] if i + 1 < len(factors) else factors[i]
                       for i in range(0, len(factors), 2)]
        data = factors[0].to_bytes(values * slot_bytes, "little")
        counts = [int.from_bytes(data[value * slot_bytes:(value + 1) * slot_bytes], "little")
                  for value in range(values)]
        p_value = two_sided_tail(counts, 0, centre, observed) / total
        return StratifiedTest(len(tests), mean_auc, min(1.0, p_value), min(1.0, min_p_value), EXACT)
    variance = sum(weight**2 * test.variance2 for weight, test in zip(weights, tests))
    continuity = min(weights)
    return StratifiedTest(len(tests), mean_auc,
                          math.nan if min_p_only else normal_two_sided(observed, variance, continuity),
                          normal_two_sided(extreme, variance, continuity), ASYMPTOTIC)


def _product(numbers) -> int:
    result = 1
    for number in numbers:
        result *= number
    return result


def design_stratified_min_p_value(sizes: list) -> float:
    """The smallest p-value the stratified test can give over benchmarks of these (n_x, n_y), without ties."""
    return stratified_u_test([_untied(n_x, n_y) for n_x, n_y in sizes], min_p_only=True).min_p_value
