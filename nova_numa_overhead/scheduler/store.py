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
"""Per-worker store of host reports, bounded, cheap to feed and to read.

Every scheduler worker process has one store. Reports arrive on the report
topic (see :mod:`nova_numa_overhead.rpc`); the store validates them
(:func:`nova_numa_overhead.report.parse`) and keeps the newest per host in
compact form, with the plan the agent made for every request-size bucket
under the default policy (report format 1.1), so that filtering and
weighing a host is a look-up. Plans for other policies, for reports that
carry none (format 1.0) and for the correction below are made on first use,
only for the hosts a request looks at, and a few are kept with the report.

Between two reports of a host, Nova's own bookkeeping of the host (its free
RAM and instance count, updated for every instance placed) tells the store
how much memory was placed there since the report. The store then plans
that memory onto the reported nodes, as the agent will, and scores the
next request on what is left (see ``[numa_overhead] claim_penalty``).

Nothing a report says can take the store or a host hostage: every number
is bounded, a sequence number that jumps further than an agent can count
or an age beyond ``report_ttl`` is refused, hosts silent for
``EVICT_AFTER_TTLS`` TTLs are forgotten and ``[numa_overhead] max_hosts``
caps the hosts held. Memory per host: about 0.7 KiB for a 4-node host and
0.8 KiB for an 8-node one (``benchmarks/scheduler_cost.py`` measures it).

Concurrency: one lock serialises the writers (ingest, sweep, forget);
readers (the filter and the weigher, in any number of threads) never take
it. An entry is replaced whole, never changed, except for its caches.
"""

import atexit
import math
import os
import sys
import threading
import time

from oslo_config import cfg
from oslo_log import log as logging

from nova_numa_overhead.overhead import planner
from nova_numa_overhead import report as report_mod

LOG = logging.getLogger(__name__)

BUCKETS = planner.BUCKETS
# Correct for at most this many guests placed since the last report.
MAX_CLAIMED_GUESTS = 16
UNKNOWN = None
DOES_NOT_FIT = math.inf
# Hosts silent for this many report_ttl are forgotten.
EVICT_AFTER_TTLS = 3
# Seconds between two passes over the store (stale hosts, eviction).
SWEEP_INTERVAL = 10.0
# A repeated warning is logged at most LOG_BURST times per LOG_INTERVAL
# seconds, then summed up once.
LOG_INTERVAL = 60.0
LOG_BURST = 10
# The most an agent's sequence number can plausibly advance between two
# reports this worker received: a burst (every scheduler worker asking for
# a report at once) plus a steady rate, per second since the older report.
SEQ_JUMP = 1000
SEQ_JUMP_PER_S = 10
# Plans made on first use kept per host, beyond which they are dropped.
MAX_LAZY = 32
# Distinct topologies and agent versions shared between hosts; the table
# starts afresh at every sweep once full (made-up ones cannot pin it).
MAX_SHARED = 1024


def bucket_for(memory_mb: int) -> int:
    """Smallest bucket that holds ``memory_mb`` (the largest one beyond)."""
    return BUCKETS[planner.bucket_index(memory_mb)]


def loggable(value) -> str:
    """A host name as it may appear in a log line: a valid one as it is,
    anything else escaped and shortened (no forged lines, no control or
    direction characters).
    """
    if type(value) is str and 0 < len(value) <= report_mod.MAX_HOST_LEN \
            and report_mod._HOST_RE.fullmatch(value):
        return value
    if isinstance(value, str):
        return ascii(value[:64]) + ('...' if len(value) > 64 else '')
    return '<unknown>'


def _plan_overhead(view, size, policy, max_nodes):
    if size > sum(view.free_mb):
        return DOES_NOT_FIT
    plan = planner.plan(view, size, policy, max_nodes)
    return DOES_NOT_FIT if plan is None else plan.overhead


def _planned(entry, key, memory_mb, plan):
    """``plan(size)`` of the request's bucket, cached on ``entry`` under
    ``key``; a bucket the host cannot hold is planned at the request's own
    size (``memory_mb``, up to half a bucket less), which it may (cached
    under that size: requests of a bucket share the first).
    """
    index = key[-1]
    overhead = entry.cached(key, lambda: plan(BUCKETS[index]))
    if overhead != DOES_NOT_FIT or memory_mb is None or \
            memory_mb >= BUCKETS[index]:
        return overhead
    return entry.cached(key + (memory_mb,), lambda: plan(memory_mb))


class _Throttle:
    """One kind of warning, at most ``burst`` lines per ``interval`` s; the
    rest are counted and summed up in one line.
    """

    def __init__(self, summary, burst=LOG_BURST, interval=LOG_INTERVAL,
                 logger=None):
        self.summary = summary
        self.burst = burst
        self.interval = interval
        self.logger = logger or LOG
        self.window = None
        self.logged = 0
        self.suppressed = 0

    def tick(self, now) -> None:
        """Close the interval if it is over, with its summary line."""
        if self.window is not None and now - self.window >= self.interval:
            if self.suppressed:
                self.logger.warning(self.summary,
                                    {'count': self.suppressed,
                                     'interval': self.interval})
            self.window = None
            self.logged = self.suppressed = 0

    def log(self, now, message, args, level=logging.WARNING,
            exc_info=False) -> None:
        self.tick(now)
        if self.window is None:
            self.window = now
        if self.logged < self.burst:
            self.logged += 1
            if args:
                self.logger.log(level, message, args, exc_info=exc_info)
            else:
                self.logger.log(level, message, exc_info=exc_info)
        else:
            self.suppressed += 1


def log_failure(throttle, message: str, exc: Exception) -> None:
    """Log, throttled at ERROR, why the filter or weigher gave up on a
    request: a bad option in one line naming it, anything else (a bug)
    with its traceback. Call it from the ``except`` block.
    """
    if isinstance(exc, cfg.Error):
        # oslo.config checks a value only when it is read: a bad one in
        # nova.conf shows up here, at every request.
        reason = 'bad [numa_overhead] option: %s' % exc
    else:
        reason = '%s: %s' % (type(exc).__name__, exc)
    throttle.log(time.monotonic(), '%(message)s (%(reason)s)',
                 {'message': message, 'reason': reason}, logging.ERROR,
                 exc_info=not isinstance(exc, cfg.Error))


class HostEntry:
    """One host's newest report, compact, and what is derived from it."""

    __slots__ = ('host', 'agent_id', 'agent_version', 'seq', 'size',
                 'topology', 'blob', 'received', 'planned', 'planned_key',
                 'stale', 'base_free', 'base_count', 'lazy')

    def __init__(self, parsed, received):
        self.host = parsed.host
        self.agent_id = parsed.agent_id
        self.agent_version = parsed.agent_version
        self.seq = parsed.seq
        self.size = parsed.size
        self.topology = parsed.topology
        self.blob = parsed.blob
        # Measurement time on this clock: arrival less the declared age.
        self.received = received
        # The agent's planned overhead per bucket, in thousandths of a
        # level, and the (policy, max_nodes) it is for; or None.
        planned = parsed.planned
        if planned is None:
            self.planned = self.planned_key = None
        else:
            self.planned = planned.overhead
            self.planned_key = (_normal(planned.policy), planned.max_nodes)
        self.stale = False
        # Nova's free RAM and instance count at the first look after the
        # report: what was placed since is their difference.
        self.base_free = None
        self.base_count = 0
        self.lazy = None

    @property
    def report(self) -> report_mod.Report:
        """The report as received (its age counted into ``received``)."""
        return report_mod.unpack(report_mod.Parsed(
            self.host, self.agent_id, self.agent_version, self.seq, 0.0,
            self.size, self.topology, self.blob, None))

    @property
    def view(self) -> planner.HostView:
        return self.report.view()

    @property
    def total_mb(self) -> int:
        return sum(n.total_mb for n in self.report.nodes)

    def cached(self, key, compute):
        """A value made on first use, kept (a few per host)."""
        lazy = self.lazy
        if lazy is None:
            lazy = self.lazy = {}
        value = lazy.get(key)
        if value is None:
            value = compute()
            if len(lazy) >= MAX_LAZY:
                lazy.clear()
            lazy[key] = value
        return value


class ReportStore:
    """Newest valid report per host, with the agents' plans."""

    def __init__(self, conf, clock=time.monotonic):
        self.conf = conf
        self.clock = clock
        self._entries: dict = {}
        self._lock = threading.Lock()
        self._group = None
        self._shared: dict = {}
        self._next_sweep = None
        self._next_room = None
        self._rejects = _Throttle(
            '%(count)d more NUMA overhead reports rejected or refused in '
            'the last %(interval)d s')
        self._refusals = _Throttle(
            '%(count)d more reports of new hosts refused in the last '
            '%(interval)d s: the NUMA overhead store is full', burst=1)
        self._failures = _Throttle(
            '%(count)d more NUMA overhead reports failed to ingest in the '
            'last %(interval)d s', burst=1)
        self.accepted = 0
        self.rejected = 0
        self.refused = 0
        self.ignored = 0
        self.evicted = 0

    @property
    def _opts(self):
        # The group object reads an option faster than conf.group.option.
        group = self._group
        if group is None:
            group = self._group = self.conf.numa_overhead
        return group

    # -- ingest -----------------------------------------------------------

    def ingest(self, data) -> bool:
        """Take a report from the wire; False (and a log line) if refused.

        Never raises: whatever arrives is logged (rate-limited) and
        dropped.
        """
        try:
            return self._ingest(data)
        except Exception:
            self.rejected += 1
            self._failures.log(self.clock(), 'Failed to ingest a NUMA '
                               'overhead report', {}, logging.ERROR,
                               exc_info=True)
            return False

    def _ingest(self, data) -> bool:
        host = data.get('host') if isinstance(data, dict) else None
        if type(host) is str and host not in self._entries and \
                len(self._entries) >= self._opts.max_hosts:
            # Full: a new host is refused before any work on its report.
            with self._lock:
                now = self.clock()
                if not self._make_room(now, self._opts.report_ttl):
                    return self._refuse_new_host(host, now)
        try:
            parsed = report_mod.parse(data)
        except report_mod.InvalidReport as exc:
            self.rejected += 1
            self._warn(self._rejects, 'Rejected NUMA overhead report from '
                       'host %(host)s: %(reason)s',
                       {'host': loggable(host), 'reason': exc})
            return False
        opts = self._opts
        ttl = opts.report_ttl
        if parsed.age > ttl:
            self.rejected += 1
            self._warn(self._rejects, 'Refused NUMA overhead report %(seq)d '
                       'of host %(host)s: its age of %(age).0f s is beyond '
                       'report_ttl (%(ttl)d s)',
                       {'seq': parsed.seq, 'host': parsed.host,
                        'age': parsed.age, 'ttl': ttl})
            return False
        with self._lock:
            now = self.clock()
            if self._next_sweep is None or now >= self._next_sweep:
                self._sweep(now, ttl)
            return self._store(parsed, now, ttl)

    def _store(self, parsed, now, ttl) -> bool:
        entries = self._entries
        host = parsed.host
        old = entries.get(host)
        if old is None:
            if len(entries) >= self._opts.max_hosts and \
                    not self._make_room(now, ttl):
                return self._refuse_new_host(host, now)
        elif old.agent_id != parsed.agent_id:
            if old.received >= now - ttl and now - parsed.age < old.received:
                # Another run's report older than the one held (the run
                # before a restart, late; or two agents given one host
                # name): it must not replace fresher figures.
                self.ignored += 1
                self._warn(self._rejects, 'Ignored NUMA overhead report '
                           '%(seq)d of host %(host)s from agent %(id)s: '
                           'older than the one held from agent %(have)s '
                           '(two agents for one host?)',
                           {'seq': parsed.seq, 'host': host,
                            'id': parsed.agent_id, 'have': old.agent_id})
                return False
        else:
            if parsed.seq <= old.seq:
                self.ignored += 1
                LOG.debug('Ignored NUMA overhead report %(seq)d of host '
                          '%(host)s: %(have)d is newer',
                          {'seq': parsed.seq, 'host': host,
                           'have': old.seq})
                return False
            fresh = old.received >= now - ttl
            jump = SEQ_JUMP + SEQ_JUMP_PER_S * max(0.0, now - old.received)
            if fresh and parsed.seq - old.seq > jump:
                self.rejected += 1
                self._warn(self._rejects, 'Refused NUMA overhead report '
                           '%(seq)d of host %(host)s: %(have)d was received '
                           '%(ago).0f s ago, a jump beyond %(jump)d',
                           {'seq': parsed.seq, 'host': host,
                            'have': old.seq, 'ago': now - old.received,
                            'jump': jump})
                return False
        entry = HostEntry(parsed, now - parsed.age)
        entry.agent_version = self._intern(entry.agent_version)
        entry.topology = self._intern(entry.topology)
        if entry.planned_key is not None:
            entry.planned_key = self._intern(entry.planned_key)
        entries[host] = entry
        self.accepted += 1
        if old is None:
            LOG.info('First NUMA overhead report of host %(host)s (agent '
                     '%(version)s)', {'host': host,
                                      'version': entry.agent_version})
        elif old.stale or old.received < now - ttl:
            LOG.info('Host %(host)s reports NUMA overhead again after '
                     '%(silent).0f s', {'host': host,
                                        'silent': now - old.received})
        LOG.debug('Accepted NUMA overhead report %(seq)d of host %(host)s',
                  {'seq': parsed.seq, 'host': host})
        return True

    def _intern(self, value):
        # Hosts of one model share their topology, and the few agent
        # versions of a cloud are shared by the hosts that run them.
        shared = self._shared.get(value)
        if shared is not None:
            return shared
        if len(self._shared) < MAX_SHARED:
            self._shared[value] = value
        return value

    def _refuse_new_host(self, host, now) -> bool:
        self.refused += 1
        self._refusals.log(now, 'NUMA overhead store full ([numa_overhead] '
                           'max_hosts = %(max)d): refused the report of new '
                           'host %(host)s; the hosts held are kept (further '
                           'refusals are counted, logged once per '
                           '%(interval)d s)',
                           {'max': self._opts.max_hosts,
                            'host': loggable(host),
                            'interval': LOG_INTERVAL})
        return False

    def _warn(self, throttle, message, args):
        throttle.log(self.clock(), message, args)

    # -- bookkeeping --------------------------------------------------------

    def sweep(self) -> None:
        """Log hosts gone stale, forget hosts silent for long (also run
        every ``SWEEP_INTERVAL`` s by ingest).
        """
        with self._lock:
            self._sweep(self.clock(), self._opts.report_ttl)

    def _sweep(self, now, ttl, evict_after=None):
        self._next_sweep = now + SWEEP_INTERVAL
        stale_before = now - ttl
        evict_before = now - (ttl * EVICT_AFTER_TTLS if evict_after is None
                              else evict_after)
        went_stale, evicted = [], []
        for host, entry in self._entries.items():
            if entry.received < stale_before:
                if entry.received < evict_before:
                    evicted.append(host)
                elif not entry.stale:
                    entry.stale = True
                    went_stale.append((host, now - entry.received))
        for host in evicted:
            del self._entries[host]
        self.evicted += len(evicted)
        for host, silent in went_stale[:LOG_BURST]:
            LOG.info('Host %(host)s has sent no NUMA overhead report for '
                     '%(silent).0f s (report_ttl %(ttl)d s): unknown to the '
                     'filter and weigher until it reports again',
                     {'host': host, 'silent': silent, 'ttl': ttl})
        if len(went_stale) > LOG_BURST:
            LOG.info('%d more hosts have sent no NUMA overhead report for '
                     'report_ttl (%d s)', len(went_stale) - LOG_BURST, ttl)
        if evicted:
            LOG.info('Forgot %(count)d hosts silent for more than %(after)d '
                     's: %(hosts)s%(more)s',
                     {'count': len(evicted), 'after': now - evict_before,
                      'hosts': ', '.join(evicted[:LOG_BURST]),
                      'more': ' ...' if len(evicted) > LOG_BURST else ''})
        for throttle in (self._rejects, self._refusals, self._failures):
            throttle.tick(now)
        if len(self._shared) >= MAX_SHARED:
            self._shared.clear()

    def _make_room(self, now, ttl) -> bool:
        """At max_hosts: forget the hosts without a fresh report (at most
        once per sweep interval); never a fresh one.
        """
        if self._next_room is not None and now < self._next_room:
            return False
        self._next_room = now + SWEEP_INTERVAL
        self._sweep(now, ttl, evict_after=ttl)
        return len(self._entries) < self._opts.max_hosts

    def get(self, host: str) -> 'HostEntry | None':
        """The host's report if it is fresh, else None."""
        entry = self._entries.get(host)
        if entry is None or \
                self.clock() - entry.received > self._opts.report_ttl:
            return None
        return entry

    def hosts(self) -> list:
        with self._lock:
            return sorted(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def forget(self, host: str) -> None:
        with self._lock:
            self._entries.pop(host, None)

    # -- look-ups ---------------------------------------------------------

    def query(self, memory_mb: int, policy: str, max_nodes: int) -> 'Query':
        """Look-ups for one request: everything per-request done once.

        Also sweeps when due, should no report arrive (a broker away):
        hosts gone stale are logged, silent ones forgotten. Without
        waiting: a request never waits for the lock.
        """
        due = self._next_sweep
        if due is not None and self.clock() >= due and \
                self._lock.acquire(blocking=False):
            try:
                self._sweep(self.clock(), self._opts.report_ttl)
            finally:
                self._lock.release()
        return Query(self, memory_mb, policy, max_nodes)

    def planned_overhead(self, host: str, free_ram_mb, num_instances,
                         memory_mb: int, policy: str, max_nodes: int):
        """Planned overhead of one request on one host (see Query)."""
        return self.query(memory_mb, policy, max_nodes).overhead(
            host, free_ram_mb, num_instances)

    def _lazy_overhead(self, entry, key, memory_mb=None):
        policy, max_nodes, _index = key
        return _planned(entry, key, memory_mb, lambda size: _plan_overhead(
            entry.view, size, policy, max_nodes))

    def _corrected_overhead(self, entry, used_mb, guests, key,
                            memory_mb=None):
        opts = self._opts
        penalty = opts.claim_penalty
        policy, max_nodes, _index = key
        claimed = (used_mb, guests, penalty)

        def plan(size):
            # The corrected view, made once for every bucket and policy.
            view = entry.cached(claimed, lambda: self._correct(
                entry.report, used_mb, guests, penalty))
            return _plan_overhead(view, size, policy, max_nodes)

        return _planned(entry, claimed + key, memory_mb, plan)

    def _correct(self, report, used_mb, guests, penalty):
        """The host's view after ``guests`` guests of ``used_mb`` in all."""
        opts = self._opts
        free = [n.free_mb for n in report.nodes]
        count = [n.guests for n in report.nodes]
        extra = [0.0] * report.size
        view = report.view()
        size = max(1, used_mb // guests)
        for _ in range(guests):
            plan = planner.plan(view, size, opts.default_policy,
                                opts.default_max_nodes)
            if plan is None:
                return report.view(extra=extra, free_mb=[0] * report.size,
                                   guests=count)
            for node, mb in plan.shares.items():
                free[node] -= mb
                count[node] += 1
                extra[node] += penalty
            view = report.view(extra=extra, free_mb=free, guests=count)
        return view


def _normal(policy: str) -> str:
    # 'none' leaves placement to the kernel and is scored like 'local'.
    return planner.LOCAL if policy == planner.NONE else policy


class Query:
    """The planned overhead of one request on any host, by look-up."""

    __slots__ = ('_store', '_entries', '_oldest', '_key', '_index',
                 '_planned_key', '_memory_mb')

    def __init__(self, store, memory_mb, policy, max_nodes):
        policy = _normal(policy)
        self._store = store
        self._entries = store._entries
        self._oldest = store.clock() - store._opts.report_ttl
        self._index = planner.bucket_index(memory_mb)
        self._key = (policy, max_nodes, self._index)
        # Planned at its own size where its bucket does not fit.
        self._memory_mb = memory_mb
        # The agents' plans answer requests of their policy and max_nodes
        # (shared by the entries: compared by identity first).
        key = (policy, max_nodes)
        self._planned_key = store._shared.get(key, key)

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
            base = entry.base_free
            if base is None:
                # The count first: a reader that sees base_free sees it.
                entry.base_count = num_instances or 0
                entry.base_free = free_ram_mb
            elif base > free_ram_mb:
                guests = max(1, (num_instances or 0) - entry.base_count)
                return self._store._corrected_overhead(
                    entry, int(base - free_ram_mb),
                    min(guests, MAX_CLAIMED_GUESTS), self._key,
                    self._memory_mb)
        planned = entry.planned
        if planned is not None and (
                entry.planned_key is self._planned_key or
                entry.planned_key == self._planned_key) and \
                self._index < len(planned):
            return planned[self._index] / 1000
        # Past the agent's plans (its bucket does not fit), or planned for
        # another policy: planned here.
        return self._store._lazy_overhead(entry, self._key, self._memory_mb)

    def overheads(self, host_states) -> list:
        """:meth:`overhead` of every HostState, in order (the hot loop of
        the filter and the weigher).
        """
        get = self._entries.get
        oldest = self._oldest
        index = self._index
        key = self._planned_key
        overhead = self.overhead
        out = []
        append = out.append
        for state in host_states:
            entry = get(state.host)
            if entry is None or entry.received < oldest:
                append(UNKNOWN)
                continue
            planned = entry.planned
            base = entry.base_free
            free = state.free_ram_mb
            if planned is None or base is None or free is None or \
                    base > free or (entry.planned_key is not key and
                                    entry.planned_key != key):
                append(overhead(state.host, free, state.num_instances))
            elif index < len(planned):
                append(planned[index] / 1000)
            else:
                append(overhead(state.host, free, state.num_instances))
        return out


class Listener:
    """The process's report listener, started by a thread of its own.

    Starting it (connecting to the broker, declaring the fanout queue,
    asking every agent for a fresh report) can take as long as the broker
    is away, so nothing a scheduling request does waits for it: the thread
    tries, logs a failure once (then at DEBUG) and tries again after 1, 2,
    4... up to ``MAX_BACKOFF`` seconds, until it is listening or stopped.
    """

    MAX_BACKOFF = 60.0

    def __init__(self, conf, store, start=None):
        self.conf = conf
        self.store = store
        self._start = start
        self._stopped = threading.Event()
        self._listening = threading.Event()
        self._thread = None
        self.failures = 0

    def start(self) -> None:
        """Start the thread and return at once."""
        self._thread = threading.Thread(
            target=self._run, name='numa-overhead-report-listener',
            daemon=True)
        self._thread.start()

    def _run(self) -> None:
        start = self._start
        if start is None:
            from nova_numa_overhead import rpc
            start = rpc.start_scheduler_listener
        delay = 1.0
        while not self._stopped.is_set():
            error = None
            try:
                server = start(self.conf, self.store)
            except Exception as exc:
                error = exc
            if error is None:
                self._listening.set()
                if self._stopped.is_set() and server is not None:
                    # stop() ran while the start waited for the broker,
                    # before its server was known: stopped now.
                    from nova_numa_overhead import rpc
                    rpc.stop_listener(server)
                return
            self.failures += 1
            LOG.log(logging.WARNING if self.failures == 1 else logging.DEBUG,
                    'Could not start the NUMA overhead report listener '
                    '(%(exc)s); hosts count as unknown until it starts, '
                    'next try in %(delay)d s', {'exc': error,
                                                'delay': delay})
            self._stopped.wait(delay)
            delay = min(delay * 2, self.MAX_BACKOFF)

    def wait(self, timeout: float) -> bool:
        """Wait until it listens (demo, tests); True if it does."""
        return self._listening.wait(timeout)

    def stop(self) -> None:
        self._stopped.set()
        from nova_numa_overhead import rpc
        rpc.stop_listeners()


_STORE = None
_STORE_PID = None
_LISTENER = None
_STORE_LOCK = threading.Lock()


def get_store(conf) -> ReportStore:
    """This process's store; its listener starts in the background.

    Called when Nova constructs the filter and the weigher, and by every
    request. The first call in a process starts the :class:`Listener`
    thread and returns at once: it never touches the broker. A forked
    scheduler worker starts a store and listener of its own right after
    the fork (on eventlet, at its first request: the hub a green thread
    would wait on is replaced after the fork). Until reports arrive, the
    filter
    and weigher treat every host as unknown.
    """
    global _STORE, _STORE_PID, _LISTENER
    pid = os.getpid()
    if _STORE is not None and _STORE_PID == pid:
        return _STORE
    with _STORE_LOCK:
        if _STORE is None or _STORE_PID != pid:
            store = ReportStore(conf)
            listener = Listener(conf, store)
            listener.start()
            _STORE, _STORE_PID, _LISTENER = store, pid, listener
    return _STORE


def start(conf) -> None:
    """Make this process's store and start its listener; never raises."""
    try:
        get_store(conf)
    except Exception:
        LOG.exception('NUMA overhead store unavailable')


def listener() -> 'Listener | None':
    """This process's listener, if its store exists."""
    return _LISTENER if _STORE_PID == os.getpid() else None


def reset_store() -> None:
    """Stop this process's listener and forget its store (tests, exit)."""
    global _STORE, _STORE_PID, _LISTENER
    from nova_numa_overhead import rpc
    with _STORE_LOCK:
        if _LISTENER is not None:
            _LISTENER.stop()
        rpc.stop_listeners()
        _STORE = _STORE_PID = _LISTENER = None


def _after_fork_in_child() -> None:
    """A forked scheduler worker starts its own listener at once.

    oslo.service forks the workers after Nova built the filter and the
    weigher in the parent, whose listener thread does not exist in the
    child (and whose lock may have been held at the fork).
    """
    global _STORE, _STORE_PID, _LISTENER, _STORE_LOCK
    rpc = sys.modules.get('nova_numa_overhead.rpc')
    if rpc is not None:
        # Before a listener of the child's own can register its server.
        # (Not imported: no server was started.)
        rpc.forget_servers_after_fork()
    if _STORE is None:
        return
    conf = _STORE.conf
    _STORE_LOCK = threading.Lock()
    _STORE = _STORE_PID = _LISTENER = None
    if _green():
        # A green thread started now would wait on the eventlet hub that
        # oslo.service replaces in the child right after the fork, never
        # to run again: the worker's first request starts it instead.
        return
    start(conf)


def _green() -> bool:
    """Whether the process runs on eventlet (a monkey-patched Nova)."""
    if 'eventlet' not in sys.modules:
        return False
    try:
        from eventlet import patcher
        return bool(patcher.is_monkey_patched('thread'))
    except Exception:
        return False


def _stop_at_exit() -> None:
    if _LISTENER is not None and _STORE_PID == os.getpid():
        try:
            _LISTENER.stop()
        except Exception:
            pass


atexit.register(_stop_at_exit)
os.register_at_fork(after_in_child=_after_fork_in_child)
