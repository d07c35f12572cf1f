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
"""From hypervisor counters to the estimator's observations.

Every sample the collector reads each guest's cumulative counters, turns
the difference with the previous read into a :class:`~.samples.Sample` and
adds it to the guest's sliding window. An observation of a guest is then
its window's mean metrics plus where it runs and where its memory lies:

* vCPU placement: the fraction of the guest's vCPUs whose last host CPU is
  on each node;
* memory placement: the fraction of the guest's memory on each node.

The estimator attributes a guest's LLC hit rate to the nodes its vCPUs run
on, its cycle loss to every (vCPU node, memory node) pair it uses and its
IPC likewise (doc/source/admin/estimator.rst has the mapping).

Where the host has resctrl memory-bandwidth monitoring (see
:meth:`~.hypervisor.Hypervisor.memory_bandwidth`), the collector also keeps
each monitored guest's last memory traffic per node, local and total, in
bytes per second (:attr:`GuestState.bandwidth`): remote traffic measured,
not inferred. It is optional: without it everything works as before.
"""

from oslo_log import log as logging

from nova_numa_overhead.compute import hypervisor as hv_mod
from nova_numa_overhead.overhead import classifier
from nova_numa_overhead.overhead import estimator
from nova_numa_overhead.overhead import samples

LOG = logging.getLogger(__name__)

# Below this many cycles counted per second the vCPU threads ran (a tenth
# of the slowest clock), the counters watch another thread; judged over at
# least MIN_VCPU_SECONDS of vCPU time.
MIN_COUNTED_HZ = 1e8
MIN_VCPU_SECONDS = 0.05


class GuestState:
    """What the collector keeps per guest between samples: one record,
    its sliding window included (no table per concern keyed by name).

    Placement is kept as flat tuples (node, value, node, value...),
    handed out as dicts or (node, value) pairs: fewer objects per guest
    than dicts or tuples of pairs.
    """

    __slots__ = ('last', 'last_time', '_previous_time', '_cpu', '_memory',
                 'delta', 'window', '_bytes', '_bytes_time', '_bandwidth',
                 '_near')

    def __init__(self):
        self.last = None         # DomainCounters of the previous read
        self.last_time = 0.0
        # The time of the read before: all guests share the read's time,
        # so the seconds between the two cost no float of their own.
        self._previous_time = 0.0
        self._cpu = ()
        self._memory = ()
        self._near = None        # the node most of its vCPUs run on
        self.delta = None        # (instructions, cycles, refs, misses)
        self.window = None       # SlidingWindow, from its first sample
        # Memory traffic (resctrl): the previous cumulative read, as
        # (node, local bytes, total bytes), its time, and the last rates.
        self._bytes = None
        self._bytes_time = 0.0
        self._bandwidth = None

    @property
    def seconds(self) -> float:
        """Seconds between the last two counter reads: what
        :attr:`delta` covers (0.0 when there is none).
        """
        if self.delta is None:
            return 0.0
        return self.last_time - self._previous_time

    @property
    def bandwidth(self) -> dict | None:
        """Node -> (local, total) bytes per second of the guest's vCPUs
        there, over the last interval; None when not measured.

        ``total - local`` is the traffic to other nodes' memory.
        """
        if self._bandwidth is None:
            return None
        return {node: (local, total)
                for node, local, total in self._bandwidth}

    @property
    def cpu(self) -> dict:
        """Node -> fraction of the guest's vCPUs there."""
        return dict(_pairs(self._cpu))

    @cpu.setter
    def cpu(self, value: dict) -> None:
        self._cpu = _flat(value)
        self._near = None

    @property
    def near(self) -> int | None:
        """The node with the largest share of the guest's vCPUs (the
        lowest of equals); None when unknown.
        """
        if self._near is None and self._cpu:
            cpu = self.cpu
            self._near = max(cpu, key=lambda n: (cpu[n], -n))
        return self._near

    @property
    def memory_mb(self) -> dict:
        """Node -> MiB of the guest's memory there."""
        return dict(_pairs(self._memory))

    @memory_mb.setter
    def memory_mb(self, value: dict) -> None:
        self._memory = _flat(value)

    def memory_items(self):
        """(node, MiB) pairs of :attr:`memory_mb`, no dict built."""
        return _pairs(self._memory)


def _flat(per_node: dict) -> tuple:
    return tuple(x for pair in per_node.items() for x in pair)


def _pairs(flat: tuple):
    items = iter(flat)
    return zip(items, items)


def fractions(per_node: dict) -> dict:
    return _fractions(per_node.items())


def _fractions(items) -> dict:
    items = tuple(items)
    total = float(sum(v for _n, v in items if v > 0))
    if total <= 0:
        return {}
    return {n: v / total for n, v in items if v > 0}


def _reading(name: str, per_node) -> tuple | None:
    """A guest's cumulative (node, local, total) bytes; None if unusable."""
    if not per_node:
        return None
    try:
        reading = tuple(sorted((int(node), int(local), int(total))
                               for node, (local, total) in per_node.items()))
    except (AttributeError, TypeError, ValueError) as exc:
        LOG.debug('Ignoring the memory bandwidth of %s: %s', name, exc)
        return None
    if any(local < 0 or total < 0 for _node, local, total in reading):
        LOG.debug('Ignoring negative memory bandwidth of %s', name)
        return None
    return reading


def _rates(previous, reading, seconds: float) -> tuple | None:
    """(node, local/s, total/s) between two readings; None if unknown.

    Local is capped at total: the two counters are read one after the
    other, so local can run a little ahead.
    """
    if previous is None or seconds <= 0:
        return None
    before = {node: (local, total) for node, local, total in previous}
    rates = []
    for node, local, total in reading:
        if node not in before:
            continue
        d_local, d_total = local - before[node][0], total - before[node][1]
        if d_local < 0 or d_total < 0:
            return None
        rates.append((node, min(d_local, d_total) / seconds,
                      d_total / seconds))
    return tuple(rates) or None


def cpu_fractions(vcpu_cpus, node_of_cpu: dict) -> dict:
    counts = {}
    for cpu in vcpu_cpus:
        node = node_of_cpu.get(cpu)
        if node is not None:
            counts[node] = counts.get(node, 0) + 1
    return fractions(counts)


class Windows:
    """The guests' sliding windows by name (each kept in its
    :class:`GuestState`).
    """

    __slots__ = ('_guests',)

    def __init__(self, guests: dict):
        self._guests = guests

    def mean(self, name: str) -> 'samples.Metrics | None':
        state = self._guests.get(name)
        if state is None or state.window is None:
            return None
        return state.window.mean()


class Collector:
    """Keeps the per-guest windows and builds observations."""

    def __init__(self, window_size: int = samples.DEFAULT_WINDOW):
        self.window_size = window_size
        self.guests: dict = {}
        self.windows = Windows(self.guests)
        self._bandwidth_error = None
        # Guests warned of counters that miss their vCPUs.
        self._missing_vcpus: set = set()

    def update(self, name: str, counters, now: float) -> bool:
        """Add a counter read; True when it made a sample."""
        state = self.guests.get(name)
        if state is None:
            state = self.guests[name] = GuestState()
        if state.last is not None and counters is not None and \
                state.last_time is not None and now <= state.last_time:
            # A second read at the same time (an event's cycle right after
            # the sampling one): no interval, no sample, and the baseline
            # stays, so that the next read's sample covers all the time
            # since it (a new baseline here would hand that read the
            # counts of no time).
            state.delta = None
            return False
        previous, state.last = state.last, counters
        state._previous_time, state.last_time = state.last_time, now
        # No sample this time: no rates either (not the last ones again).
        state.delta = None
        if previous is None or counters is None:
            return False
        sample = samples.Sample(
            instructions=counters.instructions - previous.instructions,
            cycles=counters.cycles - previous.cycles,
            llc_references=(counters.cache_references -
                            previous.cache_references),
            llc_misses=counters.cache_misses - previous.cache_misses,
            stall_cycles=counters.stalled_cycles - previous.stalled_cycles)
        if sample.cycles < 0 or sample.instructions < 0:
            # Counters restarted (guest rebooted, perf re-enabled).
            return False
        if self._misses_vcpus(name, sample.cycles, counters, previous):
            return False
        state.delta = (sample.instructions, sample.cycles,
                       sample.llc_references, sample.llc_misses)
        if state.window is None:
            state.window = samples.SlidingWindow(self.window_size)
        return state.window.add_sample(sample)

    def restarted(self, name: str) -> None:
        """A new QEMU runs the guest: its counters start over (its first
        read is no sample, even if it already counted more than the old
        one's last).
        """
        state = self.guests.get(name)
        if state is not None:
            state.last = state.delta = None

    def _misses_vcpus(self, name, cycles, counters, previous) -> bool:
        """Whether the cycles counted are far fewer than the vCPU threads
        ran (``vcpu_ns``, where the hypervisor tells it): the counters
        then watch another thread. Libvirt opens a guest's perf events
        on QEMU's main thread, inherited only by threads created after:
        events turned on while the guest runs (as the agent does), or
        opened again by a libvirtd restart, miss every vCPU. Such a
        sample is left out (warned once per guest).
        """
        if not (counters.vcpu_ns and previous.vcpu_ns):
            return False
        ran = (counters.vcpu_ns - previous.vcpu_ns) / 1e9
        if ran < MIN_VCPU_SECONDS or cycles >= ran * MIN_COUNTED_HZ:
            return False
        if name not in self._missing_vcpus:
            self._missing_vcpus.add(name)
            LOG.warning(
                'The perf counters of %(name)s miss its vCPUs (%(hz).3g '
                'cycles counted per second its vCPUs ran): its samples are '
                'left out. Libvirt counts every thread only when the '
                'events are on as QEMU starts: set [libvirt] '
                'enabled_perf_events = %(events)s in nova-compute\'s '
                'nova.conf (see the deployment guide); guests started or '
                'hard rebooted after, and not since a libvirtd restart, '
                'have them', {'name': name, 'hz': cycles / ran,
                              'events': ', '.join(hv_mod.CORE_PERF_EVENTS)})
        return True

    def measure_bandwidth(self, hypervisor, domains, now: float) -> None:
        """Read the guests' memory traffic and keep its rates.

        :meth:`~.hypervisor.Hypervisor.memory_bandwidth` is optional: a
        hypervisor without it, or one that fails, is a host without the
        source (one log line per new error), never a failed sample.
        """
        read = getattr(hypervisor, 'memory_bandwidth', None)
        answer, error, kind = {}, None, None
        if read is not None:
            try:
                answer = read(domains)
            except hv_mod.HypervisorUnavailable:
                # The connection, not the source: the agent reconnects.
                raise
            except Exception as exc:
                kind = type(exc).__name__
                error = '%s: %s' % (kind, exc)
        if error is None and not isinstance(answer, dict):
            kind = error = 'not a mapping: %r' % (answer,)
            answer = {}
        # Warned once per kind of error (its text may change every time).
        if error is not None and kind != self._bandwidth_error:
            LOG.warning('No memory bandwidth measurement (%s)', error)
        elif error is not None:
            LOG.debug('Still no memory bandwidth measurement (%s)', error)
        self._bandwidth_error = kind
        self.update_bandwidth(answer, now)

    def update_bandwidth(self, answer: dict, now: float) -> None:
        """Keep rates from a :meth:`memory_bandwidth` answer read at ``now``.

        A guest's rates are the difference with its previous read over
        the seconds between them. A guest missing from ``answer`` (no
        monitor) has none; counters that went back (the monitor was
        recreated: hard reboot, migration) start over; a read at the same
        instant as the previous one keeps the last rates.
        """
        for name in answer:
            if name not in self.guests:
                self.guests[name] = GuestState()
        for name, state in self.guests.items():
            reading = _reading(name, answer.get(name))
            if reading is None:
                state._bytes = state._bandwidth = None
                continue
            previous, seconds = state._bytes, now - state._bytes_time
            if previous is not None and seconds <= 0:
                continue
            state._bytes, state._bytes_time = reading, now
            state._bandwidth = _rates(previous, reading, seconds)

    def place(self, name: str, cpu: dict, memory_mb: dict) -> None:
        state = self.guests.get(name)
        if state is None:
            state = self.guests[name] = GuestState()
        state.cpu = cpu
        state.memory_mb = memory_mb

    def retain(self, names) -> None:
        keep = set(names)
        for name in [n for n in self.guests if n not in keep]:
            del self.guests[name]
        self._missing_vcpus &= keep

    def observations(self) -> list:
        result = []
        for name, state in self.guests.items():
            if not state._cpu:
                continue
            memory = _fractions(state.memory_items())
            window = state.window if memory else None
            mean = window.mean() if window is not None else None
            if mean is None:
                continue
            cpu = state.cpu
            result.append(estimator.Observation(
                llc_hit_rate=mean.llc_hit_rate, cycle_loss=mean.cycle_loss,
                ipc=mean.ipc, cpu=cpu, memory=memory))
        return result

    def classify(self, name: str, **kwargs) -> 'classifier.Classification':
        """Classify a guest from its latest interval (None if unknown)."""
        state = self.guests.get(name)
        if state is None or state.delta is None or state.seconds <= 0:
            return None
        instructions, cycles, refs, misses = state.delta
        return classifier.classify(instructions, cycles, refs, misses,
                                   state.seconds, **kwargs)
