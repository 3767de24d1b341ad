"""Growth that only ever goes up: a work list (or a traced program's live Works) that
rises in steps and never falls, judged without a trend interval. Pure.

The trend rule (stats.decide) asks for the lower end of the depth trend's 95% interval to
be above zero. On a loaded machine a rank is descheduled for up to a second at a time and
then catches up, so its depth climbs in stairs: the residuals around the trend are long
runs of one sign, their lag-1 autocorrelation is clamped at 0.95, the interval's variance
is inflated 39-fold, and its lower end falls to the smallest pairwise slope - a flat
stretch of a stair, 0. A reap run judged that way went from 3,329 Works to 37,960 and was
called INCONCLUSIVE.

A series that never falls needs no noise model: its noise is how far it ever falls. A
bounded list drains, so it falls by about as much as it rose (its drawdown is its range);
a leaking one only rises. The rule: the series gains at least ORDERS times its noise
(the largest fall from a running maximum, never taken below MIN_NOISE: a bounded list's
one round of sends), and its second half still carries a fair share of the gain - a list
that filled once, early, and then stayed flat is not growing; one that rose slowly and
then fast (a leak whose rate follows the load) is.
"""

from __future__ import annotations

from dataclasses import dataclass

ORDERS = 100.0  # "orders of magnitude more than its noise": two
MIN_NOISE = 2.0  # Works: a bounded list holds one round's sends, at most 2
LATE_SHARE = 0.2  # the second half of the window carries at least this share of the gain


@dataclass(frozen=True)
class Growth:
    """How a series rose over a window: its gain, its noise (the largest fall from a running
    maximum) and where the gain was made."""

    gain: float  # last - first
    drawdown: float  # the largest fall from a running maximum
    late_gain: float  # over the second half of the window
    span_s: float
    final: float

    @property
    def noise(self) -> float:
        return max(self.drawdown, MIN_NOISE)

    @property
    def rate(self) -> float:
        """Units per second over the window."""
        return self.gain / self.span_s if self.span_s > 0 else 0.0

    @property
    def only_grows(self) -> bool:
        """Rises by ORDERS x its noise, and still rises in the second half of the window."""
        return self.gain > 0 and self.gain >= ORDERS * self.noise and self.late_gain >= LATE_SHARE * self.gain

    def text(self, what: str) -> str:
        """`work list only grows: +11351 in 7.0 s (1621/s), never falling by more than 0 (final 13908)`."""
        return (
            f"{what} only grows: +{self.gain:.0f} in {self.span_s:.1f} s ({self.rate:.0f}/s), "
            f"never falling by more than {self.drawdown:.0f} (final {self.final:.0f})"
        )


def growth(points: list[tuple[float, float]]) -> Growth | None:
    """The growth of (time, value) points, oldest first; None with fewer than 3 points or
    no time between the first and the last."""
    if len(points) < 3 or points[-1][0] <= points[0][0]:
        return None
    peak, drawdown = points[0][1], 0.0
    for _, value in points:
        peak = max(peak, value)
        drawdown = max(drawdown, peak - value)
    t0, v0 = points[0]
    t1, v1 = points[-1]
    middle = _value_at(points, (t0 + t1) / 2.0)
    return Growth(v1 - v0, drawdown, v1 - middle, t1 - t0, v1)


def _value_at(points: list[tuple[float, float]], t: float) -> float:
    """The last value read at or before `t` (a step function: the series between samples)."""
    value = points[0][1]
    for time, v in points:
        if time > t:
            break
        value = v
    return value
