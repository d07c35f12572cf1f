# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.
"""Counter samples and the per-domain sliding window (Liu & Li, section 5.1).

A sample is one sampling interval of one guest's hardware counters, as
deltas. The window keeps only the three metrics the estimator needs, in a
flat array, so that a guest costs a few hundred bytes however long the
agent runs.
"""

import array
import dataclasses
import math

DEFAULT_WINDOW = 16
_FIELDS = 3  # llc hit rate, cycle loss, ipc


@dataclasses.dataclass(frozen=True, slots=True)
class Sample:
    """Counter deltas of one domain over one sampling interval."""

    instructions: float
    cycles: float
    llc_references: float
    llc_misses: float
    stall_cycles: float

    def metrics(self) -> 'Metrics | None':
        """The paper's three metrics, or None when the interval is empty."""
        values = self.values()
        return Metrics(*values) if values is not None else None

    def values(self) -> tuple | None:
        """:meth:`metrics` as a tuple (no object for the window to drop)."""
        if self.cycles <= 0 or self.instructions < 0:
            return None
        refs = max(self.llc_references, 0.0)
        misses = min(max(self.llc_misses, 0.0), refs)
        hit_rate = 1.0 - misses / refs if refs > 0 else 1.0
        cycle_loss = min(max(self.stall_cycles, 0.0) / self.cycles, 1.0)
        return hit_rate, cycle_loss, self.instructions / self.cycles


@dataclasses.dataclass(frozen=True, slots=True)
class Metrics:
    """LLC hit rate (0-1), cycle loss to LLC misses (0-1), IPC."""

    llc_hit_rate: float
    cycle_loss: float
    ipc: float


class SlidingWindow:
    """Fixed-size window of metrics with their mean (16 entries by default)."""

    __slots__ = ('_data', '_size', '_next', '_count')

    def __init__(self, size: int = DEFAULT_WINDOW):
        if size < 1:
            raise ValueError('window size must be >= 1, got %r' % size)
        # float32: plenty for ratios, half the memory per guest.
        self._data = array.array('f', [0.0] * (_FIELDS * size))
        self._size = size
        self._next = 0
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, metrics: Metrics) -> None:
        self._add(metrics.llc_hit_rate, metrics.cycle_loss, metrics.ipc)

    def _add(self, hit_rate, cycle_loss, ipc) -> None:
        base = self._next * _FIELDS
        self._data[base] = hit_rate
        self._data[base + 1] = cycle_loss
        self._data[base + 2] = ipc
        self._next = (self._next + 1) % self._size
        self._count = min(self._count + 1, self._size)

    def add_sample(self, sample: Sample) -> bool:
        """Add a sample's metrics; returns False for an empty interval."""
        values = sample.values()
        if values is None:
            return False
        self._add(*values)
        return True

    def mean(self) -> 'Metrics | None':
        if not self._count:
            return None
        # Added up slot after slot, in floats (not sum(): Python 3.12
        # compensates float sums, which would change the last digits, and
        # so maybe a level, from one Python to another).
        hit_rate = cycle_loss = ipc = 0.0
        slots = iter(self._data[:self._count * _FIELDS])
        for hit, loss, rate in zip(slots, slots, slots):
            hit_rate += hit
            cycle_loss += loss
            ipc += rate
        n = float(self._count)
        return Metrics(hit_rate / n, cycle_loss / n, ipc / n)


def percentile(values, p) -> float:
    """The ``p``-th percentile of ``values`` (linear between the two
    nearest; NaN for none).
    """
    values = sorted(values)
    if not values:
        return float('nan')
    k = (len(values) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)
