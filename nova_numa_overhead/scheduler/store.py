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
"""Per-worker store of host reports, with the planning done at arrival.

Every scheduler worker process has one store. Reports arrive on the report
topic (see :mod:`nova_numa_overhead.rpc`); the store validates them, keeps
the newest per host, and plans the default policy for every request-size
bucket at once, so that filtering and weighing a host is a dictionary
lookup. Plans for other policies are made on first use and kept with the
report.

Between two reports of a host, Nova's own bookkeeping of the host (its free
RAM and instance count, updated for every instance placed) tells the store
how much memory was placed there since the report. The store then plans
that memory onto the reported nodes, as the agent will, and scores the
next request on what is left (see ``[numa_overhead] claim_penalty``).
"""

import bisect
import math
import os
import threading
import time

from oslo_log import log as logging

from nova_numa_overhead.overhead import planner
from nova_numa_overhead import report as report_mod

LOG = logging.getLogger(__name__)

# Request-size buckets: 256 MiB * 2**k and 384 MiB * 2**k up to 6 TiB, so
# the usual flavor sizes (512 MiB, 1, 2, 3, 4, 6, 8 ... GiB) are exact.
BUCKETS = tuple(sorted(b * 2 ** k for b in (256, 384) for k in range(15)))
# Correct for at most this many guests placed since the last report.
MAX_CLAIMED_GUESTS = 16
UNKNOWN = None
DOES_NOT_FIT = math.inf


def bucket_for(memory_mb: int) -> int:
    """Smallest bucket that holds ``memory_mb`` (the largest one beyond)."""
    idx = bisect.bisect_left(BUCKETS, memory_mb)
    return BUCKETS[min(idx, len(BUCKETS) - 1)]


class HostEntry:
    """One host's newest report and everything derived from it."""

    __slots__ = ('report', 'received', 'view', 'total_mb', 'plans',
                 'baseline', 'corrected')

    def __init__(self, report, received):
        self.report = report
        # Arrival on this clock, less the age the agent declared.
        self.received = received - report.age
        self.view = report.view()
        self.total_mb = sum(n.total_mb for n in report.nodes)
        self.plans = {}
        self.baseline = None
        self.corrected = {}

    def overhead(self, view, policy, max_nodes, bucket, cache):
        key = (policy, max_nodes, bucket)
        value = cache.get(key)
        if value is None:
            if bucket > self.total_mb:
                value = DOES_NOT_FIT
            else:
                plan = planner.plan(view, bucket, policy, max_nodes)
                value = DOES_NOT_FIT if plan is None else plan.overhead
            cache[key] = value
        return value


class ReportStore:
    """Newest valid report per host, with precomputed plans."""

    def __init__(self, conf, clock=time.monotonic):
        self.conf = conf
        self.clock = clock
        self._entries: dict = {}
        self._lock = threading.Lock()
        self.accepted = 0
        self.rejected = 0

    @property
    def _opts(self):
        return self.conf.numa_overhead

    def ingest(self, data) -> bool:
        """Take a report from the wire; False (and a log line) if refused."""
        opts = self._opts
        try:
            report = report_mod.from_dict(data,
                                          max_bytes=opts.max_report_bytes)
        except report_mod.InvalidReport as exc:
            host = data.get('host') if isinstance(data, dict) else None
            if not isinstance(host, str):
                host = '<unknown>'
            self.rejected += 1
            LOG.warning('Rejected NUMA overhead report from host %(host)s: '
                        '%(reason)s', {'host': host[:255], 'reason': exc})
            return False
        with self._lock:
            old = self._entries.get(report.host)
            same_run = (old is not None and
                        old.report.agent_id == report.agent_id)
            if same_run and old.report.seq >= report.seq:
                LOG.debug('Ignored NUMA overhead report %(seq)d of host '
                          '%(host)s: %(have)d is newer',
                          {'seq': report.seq, 'host': report.host,
                           'have': old.report.seq})
                return False
            entry = HostEntry(report, self.clock())
            self._precompute(entry)
            self._entries[report.host] = entry
            self.accepted += 1
        LOG.debug('Accepted NUMA overhead report %(seq)d of host %(host)s',
                  {'seq': report.seq, 'host': report.host})
        return True

    def _precompute(self, entry):
        opts = self._opts
        for bucket in BUCKETS:
            if bucket > entry.total_mb:
                break
            entry.overhead(entry.view, opts.default_policy,
                           opts.default_max_nodes, bucket, entry.plans)

    def get(self, host: str) -> 'HostEntry | None':
        """The host's report if it is fresh, else None."""
        entry = self._entries.get(host)
        if entry is None or \
                self.clock() - entry.received > self._opts.report_ttl:
            return None
        return entry

    def hosts(self) -> list:
        return sorted(self._entries)

    def forget(self, host: str) -> None:
        with self._lock:
            self._entries.pop(host, None)

    def query(self, memory_mb: int, policy: str, max_nodes: int) -> 'Query':
        """Look-ups for one request: everything per-request done once."""
        return Query(self, memory_mb, policy, max_nodes)

    def planned_overhead(self, host: str, free_ram_mb, num_instances,
                         memory_mb: int, policy: str, max_nodes: int):
        """Planned overhead of one request on one host (see Query)."""
        return self.query(memory_mb, policy, max_nodes).overhead(
            host, free_ram_mb, num_instances)

    def _corrected_overhead(self, entry, consumed, key):
        corrected = entry.corrected.get(consumed)
        if corrected is None:
            corrected = entry.corrected[consumed] = (
                self._correct(entry, *consumed), {})
        view, cache = corrected
        return entry.overhead(view, *key, cache)

    def _correct(self, entry, used_mb, guests):
        """The host's view after ``guests`` guests of ``used_mb`` in all."""
        opts = self._opts
        report = entry.report
        free = [n.free_mb for n in report.nodes]
        count = [n.guests for n in report.nodes]
        extra = [0.0] * report.size
        view = entry.view
        size = max(1, used_mb // guests)
        for _ in range(guests):
            plan = planner.plan(view, size, opts.default_policy,
                                opts.default_max_nodes)
            if plan is None:
                free = [0] * report.size
                break
            for node, mb in plan.shares.items():
                free[node] -= mb
                count[node] += 1
                extra[node] += opts.claim_penalty
            view = report.view(extra=extra, free_mb=free, guests=count)
        return report.view(extra=extra, free_mb=free, guests=count)


class Query:
    """The planned overhead of one request on any host, by look-up."""

    __slots__ = ('_store', '_entries', '_oldest', '_key')

    def __init__(self, store, memory_mb, policy, max_nodes):
        if policy == planner.NONE:
            policy = planner.LOCAL
        self._store = store
        self._entries = store._entries
        self._oldest = store.clock() - store._opts.report_ttl
        self._key = (policy, max_nodes, bucket_for(memory_mb))

    def overhead(self, host: str, free_ram_mb=None, num_instances=None):
        """Planned overhead of the request on ``host``.

        ``free_ram_mb`` and ``num_instances`` are Nova's current view of
        the host (HostState); a drop of free RAM since the report means
        guests were placed there, and the report is corrected for them.

        :returns: the share-weighted overhead level (float), ``UNKNOWN``
            (None) without a fresh report, or ``DOES_NOT_FIT`` (inf) when the
            reported free memory cannot hold the request.
        """
        entry = self._entries.get(host)
        if entry is None or entry.received < self._oldest:
            return UNKNOWN
        if free_ram_mb is not None:
            baseline = entry.baseline
            if baseline is None:
                entry.baseline = (free_ram_mb, num_instances or 0)
            elif baseline[0] > free_ram_mb:
                used = int(baseline[0] - free_ram_mb)
                guests = max(1, (num_instances or 0) - baseline[1])
                return self._store._corrected_overhead(
                    entry, (used, min(guests, MAX_CLAIMED_GUESTS)),
                    self._key)
        value = entry.plans.get(self._key)
        if value is None:
            value = entry.overhead(entry.view, *self._key, entry.plans)
        return value


_STORE = None
_STORE_PID = None
_STORE_LOCK = threading.Lock()


def get_store(conf) -> ReportStore:
    """This process's store, listening for reports from its first use.

    A forked scheduler worker gets a store and a listener of its own. A
    listener that cannot start is logged; the store then stays empty and
    the filter and weigher treat every host as unknown.
    """
    global _STORE, _STORE_PID
    pid = os.getpid()
    if _STORE is not None and _STORE_PID == pid:
        return _STORE
    with _STORE_LOCK:
        if _STORE is None or _STORE_PID != pid:
            store = ReportStore(conf)
            from nova_numa_overhead import rpc
            try:
                rpc.start_scheduler_listener(conf, store)
            except Exception:
                LOG.exception('Could not start the NUMA overhead report '
                              'listener; hosts count as unknown')
            _STORE, _STORE_PID = store, pid
    return _STORE


def reset_store() -> None:
    """Forget this process's store (tests)."""
    global _STORE, _STORE_PID
    from nova_numa_overhead import rpc
    with _STORE_LOCK:
        rpc.stop_listeners()
        _STORE = _STORE_PID = None
