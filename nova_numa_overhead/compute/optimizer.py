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
"""Joint vCPU and memory moves, decided in predicted time, checked after.

Every ``optimize_interval`` the agent asks the cost model
(:mod:`nova_numa_overhead.overhead.cost`) what moving one floating guest,
its vCPUs and its memory together, to another set of nodes would do to
every guest of the host. A move is made only when

* its predicted gain (sum over guests of their relative speed change)
  reaches ``min_gain``, and
* that gain, over ``payback_horizon`` seconds, pays ``gain_margin`` times
  for the move's cost, ``MOVE_COST`` guest-seconds per MiB moved: a fixed
  risk price (for the TLB shootdowns and faults on pages in flight, and
  for what the model misjudges), not a function of
  ``migrate_rate_mb_per_s``, which paces the moves and times their
  verdicts.

Moves are chosen greedily, the best net gain first (a move onto several
nodes ranked by its net gain divided by 1 + ``SPREAD_MARGIN``), with the
model updated by the ones already chosen, up to ``MAX_ACTIONS`` per pass
and the period's page budget; none while the host settles
(``settle_windows`` ``loop_window`` periods after a guest started, the
model's few samples after one left). The nodes must hold the guest's
memory plus ``reserve_mb`` besides what other guests have yet to touch
(room); vCPUs stay within the CPUs Nova allowed; pinned guests are never
touched.

Where the host has no stalled-cycles event, what an LLC miss costs a
guest that is not memory-intensive is learned from its own samples
(:meth:`Optimizer._learned_stall`) and given to the model as its stall
share.

Closed loop: once a moved guest's pages have landed, its progress
(instructions per second) over ``loop_window`` samples is compared with
the same window before the move, and so are the guests on the nodes it
left and joined (guests moved in the same pass included). The move is
undone (the guest goes back where it ran, its
pages too: the kernel moves those outside a narrowed nodeset, and with
``enforcement = pages`` an undo to Nova's nodes moves them back a step
each cycle; and it is left alone for a backoff that doubles with every
undo) when the
sum of their relative changes is below ``-undo_threshold``, when those
nodes run fewer instructions per second in all by more than
``undo_threshold``, when the guest itself lost more than
``WORST_FACTOR`` times it, or when the guest, predicted to gain, lost
more than ``undo_threshold`` (the model misjudged the very guest it
moved; the neighbours' measured gains, the noisiest part of a verdict,
do not keep such a move); but not where the undo would strand the
guest (less than STRANDED of the memory it had before coming back, its
vCPUs would run away from most of its pages: :meth:`Optimizer._stranded`):
the move then stays, counted as ``kept`` and ``stranded``, the guest
backed off as after an undo. No verdict (``unjudged``) for a guest measured
fewer than ``loop_window`` samples before its move, nor across a change of
its workload (its LLC references per instruction changing class by PHASE
or more: another phase, not the move; a neighbour in that case is left
out of the verdict); such moves in a row hold the guest longer each time.
When a guest started on the host or left it between the move and its
verdict, the neighbours are left out (their change is the newcomer's or
the leaver's more than the move's) and the move is judged on the guest's
own progress, the trust learning from its own predicted change; counted
as ``host_changed``.
Moves, verdicts and undos are log lines and
notifications (advice and refusals are log lines only), and counts: per
guest (moved, kept, undone) in its metadata record, which ``status``
sums over the guests of the host; all of them in :meth:`Optimizer.status`
(the simulator's JSON).
"""

import array
import collections
import dataclasses
import math
import time

from oslo_log import log as logging

from nova_numa_overhead.compute import collector as collector_mod
from nova_numa_overhead.compute import hypervisor as hv_mod
from nova_numa_overhead.compute import placer as placer_mod
from nova_numa_overhead.overhead import cost
from nova_numa_overhead.overhead import samples as samples_mod

LOG = logging.getLogger(__name__)

MAX_ACTIONS = 4          # moves per pass
# A move onto several nodes ranks by its net gain / (1 + SPREAD_MARGIN),
# half of it: it takes CPUs, LLC and controllers on each of them that a
# later move could have used better (the pass ranks one move at a time),
# and the model overrates what several nodes' bandwidth gives a guest (in
# the simulator: a 4-vCPU guest moved onto two empty nodes was predicted
# 6.5x its speed and got 3.7x; one node was predicted 4.0x).
SPREAD_MARGIN = 1.0
# Guest-seconds a move costs per MiB of its pages: a risk price, the
# price a move had as half the guest's speed for as long as its pages take
# at 256 MiB/s (the simulator charges a guest 0.25 ms per MiB another task
# moves, an eighth of it); the rate paces moves, it does not price them.
MOVE_COST = 1 / 512.0
# What a move's neighbours are predicted to gain counts at this share of
# it (what they would lose counts in full): on the tuning seeds, of the
# neighbours' speed gains the cost model predicted 64% came true in the
# simulator's steady state, of their losses 95%, of the moved guests'
# gains 72% (the ``steady`` pairs of ``simulate --sweep --format json``):
# a move that trades a neighbour's loss for others' gains is worth less
# than the model says. Chosen among 0.3, 0.5, 0.7 and 1 on the tuning
# seeds (the bar broken in as many scenarios at 0.5 as at 1, a guest
# below 0.90x in 6 fewer, 18% less memory moved).
NEIGHBOUR_GAIN = 0.5
# Cycles per second below which a sample says nothing of a guest's
# progress (a paused guest's vCPU threads do not run; an idle one's run
# for its timer ticks): the verdicts' windows skip it.
ACTIVE_HZ = 1e5
BACKOFF_BASE = 60.0      # seconds left alone after a first undo
BACKOFF_MAX = 3600.0
RETURN_STALLS = 3         # steps of pages going back that get no nearer
#                          before the agent stops bringing them back
BACKOFF_UNDOS_MAX = 32   # undos a record may bring back (2 ** 32 x 60 s
#                          is BACKOFF_MAX already)
HOLD = 30.0              # seconds a kept move is left before the next
HISTORY = 32             # samples of progress a guest may keep: the most
#                          loop_window can ask for (each keeps twice it)
EXPIRE = 120.0           # seconds after settling a verdict may wait for
#                          (twice loop_window samples where longer)
FALLBACK_RATE = 2048.0   # MiB/s assumed without migrate_rate_mb_per_s
PHASE = 2.0              # LLC references per instruction changed by this
#                          factor and across MEMORY_INTENSIVE_RPKI: the
#                          workload changed (a move changes its LLC misses,
#                          its references far less)
MIN_SHIFT = 0.05         # share of a guest's pages worth a move
# Predictions one pass may make (each costs a pass over the host's
# guests): bounds a pass on a crowded host; the guests not reached are
# first at the next pass. The simulator's hosts (up to 40 guests) need
# about 320 at most.
PREDICTIONS = 400
ADVICE_INTERVAL = 60.0   # seconds between passes that can only advise
WORST_FACTOR = 3.0       # a single guest may lose 3 x undo_threshold
#                          (undo_threshold where it was predicted to gain)
STRANDED = 0.5           # an undo that could bring back less than this
#                          share of the guest's pages is not made
TRUST_START = 1.0        # trust in the model before any verdict
TRUST_MIN = 0.1
TRUST_WEIGHT = 0.3       # weight of the latest verdict
# A trust below TRUST_START makes moves rarer, so that verdicts, the only
# way to learn a higher one, may stop: after TRUST_IDLE seconds without
# one (the agent stopped included, as its state file says), the trust
# goes back towards TRUST_START, half the way every TRUST_HALF_LIFE
# seconds, and the optimizer tries the model again (its verdicts lower it
# again where it still misjudges the host).
TRUST_IDLE = 3600.0
TRUST_HALF_LIFE = 6 * 3600.0
# Without the stalled-cycles event, for a guest that is not
# memory-intensive: the cycles an LLC miss costs it, learned from its own
# samples (how its CPI moved with its misses per instruction as
# neighbours came and went), where they vary enough.
STALL_POINTS = 120       # samples it weighs per guest (exponentially)
STALL_MIN_POINTS = 10
STALL_SPREAD = 0.1       # relative spread of misses per instruction needed
STALL_FIT = 0.8          # correlation of CPI with them needed to learn
STALL_FORGET = 0.7       # and below which what was learned is forgotten
#                          (a gap: a guest near one threshold does not
#                          learn and forget in turn)
STALL_MAX_CYCLES = 1000.0  # a miss costs at most this (a slow remote one)
SHIFT_MAX = 60.0         # seconds a guest whose workload keeps changing
#                          is held (then taken as a steady mixed one)
# Verdicts whose predictions the optimizer keeps beside what was measured
# (calibration(): how well the cost model foresaw the moves' effects on
# this host), the most recent ones; each has its guest and, unless guests
# started or left meanwhile, its measured neighbours.
CALIBRATION = 256
CALIBRATION_LOG = 50     # verdicts between two log lines of them
CALIBRATION_MISS = 3.0   # % off the predicted speed that is a miss
CALIBRATION_BAND = 0.005  # a speed predicted within this of 1: no change
NO_MEMORY = 'no memory measured'  # a step of pages that read none
UNSEEN_WAIT = 60.0       # seconds a guest the model cannot see yet keeps
#                          other guests off its nodes (its counters may
#                          never come: not for ever); longer where the
#                          samples it takes are further apart


@dataclasses.dataclass(slots=True)
class Rates:
    """A guest's counters per second over one sample."""

    at: float
    ips: float
    cps: float
    rps: float
    mps: float


class Progress:
    """A guest's last ``size`` (twice HISTORY at most) samples of
    :class:`Rates`, oldest first, as a ring of floats: 40 bytes a sample
    (as objects they took about 190).
    """

    __slots__ = ('_data', '_size', '_next', '_count')
    WIDTH = 5

    def __init__(self, size: int = HISTORY):
        self._data = array.array('d', [0.0] * (self.WIDTH * size))
        self._size = size
        self._next = 0
        self._count = 0

    def append(self, rates: Rates) -> None:
        self.add(rates.at, rates.ips, rates.cps, rates.rps, rates.mps)

    def add(self, at, ips, cps, rps, mps) -> None:
        """:meth:`append` without the :class:`Rates` object."""
        data, i = self._data, self._next * self.WIDTH
        data[i] = at
        data[i + 1] = ips
        data[i + 2] = cps
        data[i + 3] = rps
        data[i + 4] = mps
        self._next = (self._next + 1) % self._size
        self._count = min(self._count + 1, self._size)

    def __len__(self) -> int:
        return self._count

    def __iter__(self):
        start = self._next - self._count
        for k in range(self._count):
            i = (start + k) % self._size * self.WIDTH
            yield Rates(*self._data[i:i + self.WIDTH])

    def mean(self, since, window: int, active: bool = False
             ) -> Rates | None:
        """The mean of the last ``window`` samples taken after ``since``
        (None: any), or None when there are fewer; ``active``: of the
        samples where the guest ran (ACTIVE_HZ), the others skipped.
        """
        data, width = self._data, self.WIDTH
        found = []
        k = self._next
        for _ in range(self._count if active else
                       min(self._count, window)):
            k = (k - 1) % self._size
            if since is not None and data[k * width] <= since:
                break
            if active and data[k * width + 2] < ACTIVE_HZ:
                continue
            found.append(k * width)
            if len(found) == window:
                break
        if len(found) < window or window <= 0:
            return None
        n = float(window)
        sums = [0.0] * 4
        for i in reversed(found):      # oldest first, as the samples came
            for j in range(4):
                sums[j] += data[i + 1 + j]
        return Rates(data[found[0]], sums[0] / n, sums[1] / n, sums[2] / n,
                     sums[3] / n)


@dataclasses.dataclass
class Check:
    """A move waiting for its verdict."""

    guest: str
    at: float
    settle: float             # when its pages should have landed
    before: float             # its instructions per second before
    neighbours: dict          # name -> instructions per second before
    undo: tuple               # (nodes, cpus) to go back to
    predicted: float
    nodes: tuple
    moved_mb: float
    trust: float = 1.0        # the optimizer's trust when it chose it
    # The predicted speed changes it brought (taken back by an undo).
    effects: dict = dataclasses.field(default_factory=dict)
    # name -> LLC references per instruction before (it and its
    # neighbours): a phase of a workload changes them, a move barely.
    rpi: dict = dataclasses.field(default_factory=dict)
    # Its undo confines it to the nodes that held its memory, where Nova
    # had left it free: without room there, Nova's nodes again.
    from_held: bool = False
    # node -> MiB of its memory before the move (a move of its vCPUs
    # alone: none): with enforcement = pages, an undo to Nova's nodes
    # moves its pages back towards these shares.
    memory_before: dict = dataclasses.field(default_factory=dict)
    # A guest started on the host (or again), or left it, since: that
    # changes its neighbours' speed more than the move (measured in the
    # simulator: of the neighbours a move was predicted to leave within
    # 3% of their speed, 37% lost 10% or more across such a change, 5%
    # without), so the verdict is then taken on the guest's own progress
    # alone.
    host_changed: bool = False
    # Its own predicted speed after / before with every move of its pass
    # (None: effects[guest]).
    expected: float | None = None
    # Its verdict is final: kept, or the undo made (or failed for good);
    # libvirt lost after that (writing the guest's record) does not have
    # it judged again.
    final: bool = False

    def own_expected(self) -> float:
        """What its guest's speed was predicted to become (after /
        before), with every move of its pass.
        """
        if self.expected is not None:
            return self.expected
        return self.effects.get(self.guest, 1.0)


@dataclasses.dataclass
class Action:
    guest: str
    nodes: tuple
    cpus: tuple
    gain: float
    cost: float
    moved_mb: float
    # (cpu, memory): node -> fraction; cpu None: left to the kernel
    predicted: tuple
    with_memory: bool = True  # False: vCPUs alone, pages stay
    # name -> predicted speed after / before, for the guests it reaches
    effects: dict = dataclasses.field(default_factory=dict)
    # What it was ranked on: its gain net of its cost per second of the
    # payback horizon, divided by 1 + SPREAD_MARGIN onto several nodes
    # (None: not ranked).
    score: float | None = None
    # The model's own net speed change (trust-scaled), its neighbours'
    # gains in full (``gain`` counts them at NEIGHBOUR_GAIN): what its
    # verdict measures against (None: ``gain``).
    net: float | None = None
    # Set once its pass is chosen: its guest's predicted speed after /
    # before with every move of the pass.
    expected: float | None = None


@dataclasses.dataclass
class Return:
    """Pages on their way, a step each cycle: back after an undo (to
    Nova's nodes), or to the even shares of a move onto nodes that held
    some of them already.
    """

    shares: dict              # node -> share of its memory to reach
    left: float | None = None  # the fewest MiB still to move at a step
    stalls: int = 0           # steps since it last got nearer
    moved_mb: float = 0.0
    queued: bool = False      # the last step queued pages
    # A move's landing: a step that finds pages outside the nodes of
    # ``shares`` is no stall (the kernel may still be moving them), and
    # it ends at ``until`` (agent clock) however far it got.
    landing: bool = False
    until: float = math.inf
    # Steps in a row that failed or could not read its memory (a
    # landing tries again next cycle, RETURN_STALLS times).
    failures: int = 0


class Optimizer:
    """The agent's optimizer and closed loop (one per agent)."""

    def __init__(self, agent):
        self.agent = agent
        self.opts = agent.opts
        self.history: dict = {}
        self.checks: dict = {}
        # name -> moves in a row without a verdict (each holds it longer).
        self.unjudged_run: dict = {}
        self.backoff: dict = {}       # name -> (undos, until)
        # name -> Return: the pages of a move undone to Nova's nodes go
        # back where they were, a step each cycle.
        self.returning: dict = {}
        # name -> Return: the pages of a move onto nodes some of them are
        # on already (narrowing the nodeset moves only those outside it)
        # go on to its even shares, a step each cycle, within the page
        # budget; its verdict waits for them.
        self.landing: dict = {}
        self.held: dict = {}          # name -> not before
        self.failures: dict = {}      # name -> moves failed in a row
        self.advised: dict = {}       # name -> the advice last logged
        # name -> when it was first listed (or started again, resumed).
        self.seen: dict = {}
        self.counts = collections.Counter()
        # name -> its moves and verdicts (kept in its metadata record, so
        # that they outlive the agent and show in ``status``).
        self.per_guest: dict = {}
        # name -> the product of the speed changes the optimizer's moves
        # were predicted to bring it since it came (``guest_floor``).
        self.standing: dict = {}
        # name -> the sums of a least-squares fit of CPI on misses per
        # instruction over its samples, each older one weighing 1 /
        # STALL_POINTS less ([weight, x, y, xx, yy, xy]: an array of six
        # floats, not the samples), and the cycles per miss last learned
        # from them.
        self.points: dict = {}
        self.per_miss: dict = {}
        self.next_pass = None
        # When a guest last started on the host, and when one last left
        # it (None: not since the agent started).
        self.changed_at = None
        self.left_at = None
        # name -> since when its workload has been changing (shifting).
        self.shift_since: dict = {}
        # How far the model's predictions came true on this host (the
        # verdicts' net change / the predicted gain, smoothed): predicted
        # gains are scaled by it, so a host whose costs the model
        # misjudges gets fewer, surer moves.
        self.trust = TRUST_START
        # The trust as the last verdict that taught it left it, when
        # (agent clock; None: not since the agent started) and at what
        # wall-clock time (for the state file); whether its recovery
        # since was logged. ``trust`` is what it has recovered to.
        self.learned_trust = TRUST_START
        self.trust_since = None
        self.learned_at = None
        self.recovering = False
        # When the trust's recovery last looked (agent clock).
        self._recovered_at = None
        # Guests whose record libvirt lost (written again at the next
        # step), and the loss to raise once the step's work is done.
        self.unwritten: set = set()
        self._lost = None
        # (predicted, measured) speed after / before of the moved guests
        # and of their measured neighbours, at the verdicts.
        self.predictions = {
            'guest': collections.deque(maxlen=CALIBRATION),
            'neighbours': collections.deque(maxlen=CALIBRATION * 4)}
        # name -> (when, whose) of the moves and undos predicted to change
        # its speed that a verdict to come may look back to.
        self.changed_by: dict = {}
        # Called with every move just before it is made, and what it
        # returns (a callable or None) once the move is made: the
        # simulator compares its predictions with its own steady state.
        # None on a real host.
        self.observer = None
        self._views: dict = {}
        self._left = PREDICTIONS
        self._start = 0

    # -- measuring ------------------------------------------------------------

    def observe(self, now: float) -> None:
        """Keep each guest's latest rates (after the agent's sample)."""
        guests = self.agent.collector.guests
        for name in [n for n in self.history if n not in guests]:
            del self.history[name]
        # A guest gone with its move awaiting a verdict: none comes.
        self.counts['expired'] += sum(1 for n in self.checks
                                      if n not in guests)
        for table in (self.checks, self.held, self.failures, self.advised,
                      self.seen, self.points, self.per_miss,
                      self.unjudged_run, self.shift_since):
            for name in [n for n in table if n not in guests]:
                del table[name]
        # Kept while the guest is here, measured or not (a backoff read
        # from its record outlives a first sample that failed).
        for table in (self.per_guest, self.standing, self.backoff,
                      self.returning, self.landing, self.changed_by):
            for name in [n for n in table if n not in self.agent.domains]:
                del table[name]
        self._forget_changes(now)
        for name, state in guests.items():
            self.seen.setdefault(name, now)
            if state.delta is None or state.seconds <= 0 or \
                    state.last_time != now:
                continue
            instructions, cycles, refs, misses = state.delta
            s = state.seconds
            rates = self.history.get(name)
            if rates is None:
                # No mean takes more than loop_window samples; twice that
                # kept, so that a verdict's window finds them past samples
                # where the guest hardly ran (Progress.mean's active).
                rates = self.history[name] = Progress(
                    2 * self.opts.loop_window)
            rates.add(now, instructions / s, cycles / s, refs / s,
                      misses / s)
            # Only the samples where it is light: a memory-intensive
            # guest's misses rise with the controllers' queueing, which the
            # slope would count again.
            x = min(misses, refs) / instructions if instructions > 0 else -1
            y = cycles / instructions if instructions > 0 else -1
            if 0 <= x < math.inf and 0 < y < math.inf and \
                    not cost.intensive(refs / instructions):
                sums = self.points.get(name)
                if sums is None:
                    sums = self.points[name] = array.array('d', [0.0] * 6)
                keep = 1.0 - 1.0 / STALL_POINTS
                for i, v in enumerate((1.0, x, y, x * x, y * y, x * y)):
                    sums[i] = sums[i] * keep + v

    def resume(self, name, recorded) -> None:
        """A guest's counts and backoff from the record this host's agent
        wrote (an agent restart does not move a guest it backs off from).
        """
        self.per_guest[name] = collections.Counter(
            moved=recorded.moved, kept=recorded.kept, undone=recorded.undone)
        undos = min(recorded.backoff_undos, BACKOFF_UNDOS_MAX)
        until = hv_mod.parse_utc(recorded.backoff_until) \
            if recorded.backoff_until else None
        if not undos and until is None:
            return
        left = 0.0 if until is None else until - time.time()
        # A clock set back, or a hand-edited record: BACKOFF_MAX at most.
        self.backoff[name] = (undos, self.agent.clock() +
                              min(max(left, 0.0), BACKOFF_MAX))

    def backoff_record(self, name) -> tuple:
        """(undos, until) of ``name``'s backoff for its record: until
        when the optimizer leaves it alone (after an undo, a kept move, a
        move without a verdict or one waiting for it), ISO 8601 UTC, ''
        if it does not now.
        """
        undos, until = self.backoff.get(name, (0, 0.0))
        until = max(until, self.held.get(name, 0.0))
        check = self.checks.get(name)
        if check is not None:
            # A restarted agent cannot judge it: left alone as long as
            # its verdict would have taken.
            until = max(until, check.settle + self.opts.loop_window *
                        self.opts.sample_interval)
            land = self.landing.get(name)
            if land is not None:
                # Its pages still landing: as long as they may take.
                until = max(until, land.until + self.opts.loop_window *
                            self.opts.sample_interval)
        left = until - self.agent.clock()
        return undos, hv_mod.format_utc(time.time() + left) \
            if left >= 1.0 else ''

    def guest_counts(self, name) -> dict:
        """The optimizer's moves of ``name`` and their verdicts."""
        counts = self.per_guest.get(name, {})
        return {k: counts.get(k, 0) for k in ('moved', 'kept', 'undone')}

    def _count(self, name, what) -> None:
        self.counts[what] += 1
        self.per_guest.setdefault(name, collections.Counter())[what] += 1

    def _mean(self, name, since=None, last=None,
              active=False) -> Rates | None:
        """The mean of ``name``'s last ``last`` (``loop_window``) samples
        taken after ``since``, or None when it has fewer (``active``: of
        those where its vCPUs ran, :meth:`Progress.mean`).
        """
        window = self.opts.loop_window if last is None else last
        history = self.history.get(name)
        return history.mean(since, window, active) \
            if history is not None else None

    # -- the pass -------------------------------------------------------------

    def _rate(self) -> float:
        """MiB/s the pages of a move are assumed to go at, for the page
        budget of a pass and the time of its verdict: FALLBACK_RATE
        without a limit, at least 1 (a rate below 1 MiB/s still bounds
        the agent's own page moves, agent.RateLimit).
        """
        rate = self.opts.migrate_rate_mb_per_s
        return max(rate, 1.0) if rate > 0 else FALLBACK_RATE

    def due(self, now: float) -> bool:
        """Whether a pass is due (never with ``optimize`` off or
        ``enforcement = off``).
        """
        if not self.opts.optimize or self.opts.enforcement == 'off':
            return False
        if self.next_pass is None:
            self.next_pass = now + self._interval()
            return False
        return now >= self.next_pass

    def _interval(self) -> float:
        """Seconds to the next pass: ``optimize_interval``; at least
        ADVICE_INTERVAL when the pass can only advise (a pass costs a
        crowded host up to a second of CPU: not every 5 s for a log line).
        """
        interval = float(self.opts.optimize_interval)
        if self.opts.enforcement not in (placer_mod.NODESET,
                                         placer_mod.PAGES):
            interval = max(interval, ADVICE_INTERVAL)
        return interval

    def step(self, now: float) -> list:
        """Verdicts on earlier moves, then maybe new moves."""
        self.observe(now)
        for name in list(self.unwritten):
            # Records libvirt lost at an earlier step.
            domain = self.agent.domains.get(name)
            if domain is None:
                self.unwritten.discard(name)
            else:
                self._write_record(domain)
        self._raise_lost()
        # A verdict now learns from the trust recovered to now.
        self._recover_trust(now)
        self.verdicts(now)
        actions = []
        if self.due(now) and not self._settling_logged(now):
            self.next_pass = now + self._interval()
            actions = self.plan(now)
            for action in actions:
                self.apply(action, now)
        # After the pass: its moves take the page budget first.
        self.bring_back()
        return actions

    def step_back(self) -> None:
        """Another placer took over the host (numad): the moves awaiting
        their verdict get none (counted ``expired``: their windows would
        measure the other placer's moves), and no pages go on landing or
        coming back (it binds the guests where it wants them).
        """
        self.counts['expired'] += len(self.checks)
        self.checks.clear()
        self.landing.clear()
        self.returning.clear()

    def host_model(self) -> cost.HostModel:
        """The cost model's view of the host: topology, the probe's
        matrix where there is one (its bandwidth as capacities where all
        of each node's CPUs measured it, else as ratios scaled to
        ``node_bandwidth_mbps``), ``node_bandwidth_mbps``.
        """
        agent = self.agent
        topology = agent.topology
        matrix = agent.estimator_topology
        return cost.HostModel.build(
            cpus=[len(n.cpus) for n in topology.nodes],
            cores=[n.cores or len(n.cpus) for n in topology.nodes],
            llc_mb=[n.llc_mb for n in topology.nodes],
            distances=topology.distances,
            bandwidth_mbps=self.opts.node_bandwidth_mbps,
            latency_ns=matrix.latency_ns,
            matrix_mbps=matrix.bandwidth_mbps,
            matrix_streams=matrix.bandwidth_streams)

    def loads(self) -> list:
        """What every measured guest does now (pinned ones included: they
        share the nodes).
        """
        out = []
        windows = self.agent.collector.windows
        size = self.agent.topology.size
        for name, state in self.agent.collector.guests.items():
            domain = self.agent.domains.get(name)
            mean = self._mean(name, last=self._load_samples())
            # A node the topology does not know (hot-added since): left
            # out of the model, not a failure of the pass.
            cpu = {n: f for n, f in state.cpu.items() if 0 <= n < size}
            memory = {n: f for n, f in collector_mod.fractions(
                state.memory_mb).items() if 0 <= n < size}
            if domain is None or mean is None or not cpu or not memory or \
                    mean.ips <= 0:
                continue
            metrics = windows.mean(name)
            stall = None
            if metrics is not None and metrics.cycle_loss > 0:
                stall = metrics.cycle_loss
            else:
                stall = self._learned_stall(name, mean)
            bandwidth = state.bandwidth
            measured = sum(total for _local, total in bandwidth.values()) \
                / 1e6 if bandwidth else None
            try:
                reach = self._reach(domain)
            except hv_mod.DomainGone:
                continue
            out.append(cost.GuestLoad(
                name=name, vcpus=domain.vcpus, cpu=cpu, memory=memory,
                ips=mean.ips, cpi=mean.cps / mean.ips,
                rpi=mean.rps / mean.ips,
                mpi=min(mean.mps, mean.rps) / mean.ips, stall=stall,
                measured_mbps=measured, reach=reach,
                release=() if reach else self._release(domain)))
        return out

    def _release(self, domain) -> tuple:
        """Nodes between which the kernel would balance the guest's
        vCPUs once pinned to every CPU Nova allows it (a move that leaves
        them to the kernel): () for a guest Nova pinned, or whose CPUs
        are on one node.
        """
        if domain.pinned:
            return ()
        node_of = self.agent.topology.node_of_cpu()
        cpus = self.agent.nova_cpus.get(domain.name, ()) or node_of
        nodes = {node_of[c] for c in cpus if c in node_of}
        return tuple(sorted(nodes)) if len(nodes) > 1 else ()

    def _reach(self, domain) -> tuple:
        """Nodes between which the kernel balances the guest's vCPUs:
        those of its affinity where it spans several and neither Nova
        (dedicated CPUs) nor the agent pinned them to fewer CPUs than
        Nova allows; () where they stay (or the affinity is unknown).
        An agent's pin over several nodes keeps its split, as the model
        predicted it when the move was chosen (and as the simulator keeps
        it; the kernel would balance within it).
        """
        agent = self.agent
        if domain.pinned:
            return ()
        own = agent.restrictions.get(domain.name, ((), ()))[1]
        if own and not set(agent.nova_cpus.get(domain.name, ()) or
                           agent.topology.node_of_cpu()).issubset(own):
            return ()
        nodes = agent.vcpu_reach(domain) or ()
        return tuple(sorted(nodes)) if len(nodes) > 1 else ()

    def _learned_stall(self, name, mean) -> float | None:
        """The share of ``name``'s cycles stalled on LLC misses, from the
        cycles per miss its own samples show (least squares of CPI on
        misses per instruction, where these spread by STALL_SPREAD and
        CPI follows them by STALL_FIT; never below MISS_CYCLES, at most
        STALL_MAX_CYCLES; forgotten where they spread and CPI follows them
        by less than STALL_FORGET); None where not learned, and for a
        memory-intensive guest (whose samples are not fitted either).

        Without the stalled-cycles event the cost model charges a miss
        ``MISS_CYCLES``, and for a memory-intensive guest also reads a
        high CPI as stalls. A guest that rarely misses but waits for each
        miss in full (little memory-level parallelism) pays several times
        that: the model saw no gain in moving it away from a neighbour
        that thrashes the LLC. Its own CPI, sample after sample, shows
        what a miss costs it. Not for memory-intensive guests: their misses
        rise with the controllers' queueing, which the slope would count
        again (on the simulator's tuning sweeps: a scenario further below
        Nova's default and one moving more than its guests' memory).
        """
        if not self.opts.learn_miss_cost:
            return None
        sums = self.points.get(name)
        if sums is not None and sums[0] >= STALL_MIN_POINTS:
            w, sx, sy, sxx, syy, sxy = sums
            mx, my = sx / w, sy / w
            vx = sxx / w - mx * mx
            vy = syy / w - my * my
            cov = sxy / w - mx * my
            if mx > 0 and vx > 0 and math.sqrt(vx) >= STALL_SPREAD * mx:
                fit = STALL_FORGET if name in self.per_miss else STALL_FIT
                if vy > 0 and cov / math.sqrt(vx * vy) >= fit:
                    # Never below what the model charges a miss anyway.
                    learned = min(max(cov / vx, cost.MISS_CYCLES),
                                  STALL_MAX_CYCLES)
                    if name not in self.per_miss:
                        LOG.info('Learned from the samples of %(guest)s '
                                 'that an LLC miss costs it about '
                                 '%(cycles).0f cycles (the cost model '
                                 'charges %(default).0f without it)',
                                 {'guest': name, 'cycles': learned,
                                  'default': cost.MISS_CYCLES})
                    self.per_miss[name] = learned
                elif self.per_miss.pop(name, None) is not None:
                    # Its misses vary and its CPI does not follow them
                    # (any more): what was learned no longer holds.
                    LOG.info('Forgot what an LLC miss costs %s: its CPI no '
                             'longer follows its misses', name)
        per_miss = self.per_miss.get(name)
        if per_miss is None or mean.ips <= 0 or mean.cps <= 0 or \
                cost.intensive(mean.rps / mean.ips):
            return None
        mpi = min(mean.mps, mean.rps) / mean.ips
        return min(per_miss * mpi / (mean.cps / mean.ips), cost.MAX_STALL)

    def movable(self, now: float) -> list:
        """Guests the optimizer may move now."""
        agent = self.agent
        out = []
        for name, domain in agent.domains.items():
            if name in self.checks or not agent.rebalanced(name, domain):
                continue
            if self.backoff.get(name, (0, 0.0))[1] > now or \
                    self.held.get(name, 0.0) > now:
                continue
            if self.shifting(name, now):
                continue
            out.append(domain)
        return out

    def shifting(self, name, now=None) -> bool:
        """Whether ``name``'s workload changed within its last
        ``loop_window`` samples (its last sample's LLC references per
        instruction against any other of them, as :func:`_changed` tells
        another phase): the rates a move would be chosen on mix two
        workloads, and its verdict would find its workload changed. It
        may be moved once a whole window shows the new one, or once its
        workload has kept changing for SHIFT_MAX seconds (a workload
        that alternates faster than the window, taken as a steady mixed
        one; its verdict may still find it changed).
        """
        history = self.history.get(name)
        last = self._mean(name, last=1)
        changed = history is not None and last is not None and any(
            _changed(s.rps / s.ips, last) is not None
            for s in list(history)[-self.opts.loop_window:] if s.ips > 0)
        if not changed:
            self.shift_since.pop(name, None)
            return False
        now = self.agent.clock() if now is None else now
        since = self.shift_since.get(name)
        if since is None:
            since = self.shift_since[name] = now
            LOG.debug('%s not moved for now: its workload is changing '
                      '(LLC references per instruction)', name)
        return now - since < SHIFT_MAX

    def host_changed(self, now: float, started: bool = True) -> None:
        """A guest started on the host (or again: restarted, resumed) or
        left it: the moves awaiting their verdict are judged on their
        guest alone; after a start (``started``), no move is made until
        the host settles. A guest leaving brings no newcomer touching its
        memory and makes no node look idle: the optimizer waits only
        until the model's few samples are past it (:meth:`settle_left`),
        and a move whose window before it still holds the guest that left
        is judged on its guest alone (:meth:`apply`).
        """
        if started:
            self.changed_at = now
        else:
            self.left_at = now
        for check in self.checks.values():
            check.host_changed = True

    def settle_left(self, now: float) -> float:
        """Seconds until the host has settled (0: it has): a guest started
        less than ``settle_windows`` ``loop_window`` periods ago, every
        guest's rates still mix the host before and after (a newcomer
        touching its memory, its neighbours slowed by it), and a move
        chosen on them would be judged against a host still changing; a
        guest left less than the model's samples ago (:meth:`loads`), the
        rates the moves would be chosen on still hold it. ``settle_windows
        = 0``: no wait.
        """
        if not self.opts.settle_windows:
            return 0.0
        left = 0.0
        if self.changed_at is not None:
            quiet = self.opts.settle_windows * self.opts.loop_window * \
                self.opts.sample_interval
            left = self.changed_at + quiet - now
        if self.left_at is not None:
            left = max(left, self.left_at + self._load_samples() *
                       self.opts.sample_interval - now)
        return max(0.0, left)

    def _load_samples(self) -> int:
        """Samples of a guest's progress the cost model's rates average."""
        return min(3, self.opts.loop_window)

    def _settling_logged(self, now: float) -> bool:
        """Whether the host still settles, with a debug line: a pass due
        meanwhile waits (it runs at the first cycle after, not a whole
        interval later).
        """
        left = self.settle_left(now)
        if left > 0:
            LOG.debug('Optimizer pass held back %.0f s more: a guest '
                      'started or left, the host settles', left)
        return left > 0

    def restarted(self, name, now: float) -> None:
        """``name`` started again (or resumed: after a pause, at the end
        of an incoming live migration): its progress so far is another
        run's, and it is unseen again from ``now``.
        """
        self.history.pop(name, None)
        self.points.pop(name, None)
        self.per_miss.pop(name, None)
        self.seen[name] = now
        # Its placement is the new run's: no page goes back to where the
        # old run's were, and a move of the old run gets no verdict.
        self.returning.pop(name, None)
        self.landing.pop(name, None)
        if self.checks.pop(name, None) is not None:
            self.counts['expired'] += 1

    def unseen(self, measured, now: float) -> set:
        """Nodes of the guests the cost model cannot see yet: those with
        no progress measured (listed, started or resumed less than
        ``min(3, loop_window)`` samples ago), for up to UNSEEN_WAIT seconds
        (or that many samples and one, if longer) since. A guest measured
        idle counts as seen (it adds no load to the model); pinned guests
        and guests whose record the agent cannot read are never sampled
        (no perf events) and count as seen. Only nodes holding at least
        MIN_SHIFT of a guest's memory count.
        """
        nodes = set()
        window = min(3, self.opts.loop_window)
        wait = max(UNSEEN_WAIT, (window + 1) * self.opts.sample_interval)
        for name, state in self.agent.collector.guests.items():
            domain = self.agent.domains.get(name)
            if name in measured or domain is None or domain.pinned or \
                    domain.metadata_error or \
                    now - self.seen.get(name, now) > wait or \
                    self._mean(name, last=window) is not None:
                continue
            nodes.update(n for n, f in state.cpu.items() if f > 0)
            nodes.update(n for n, f in collector_mod.fractions(
                state.memory_mb).items() if f >= MIN_SHIFT)
        return nodes

    def candidates(self, domain, model: cost.HostModel,
                   free=None) -> list:
        """Node sets the guest could move to: single nodes; for a guest of
        more than one vCPU also each node with its nearest neighbour, and
        the nearest larger sets where one node's CPUs are too few (pairs
        only where one node is too small was measured: worse); for a
        guest whose memory (with ``reserve_mb``) no allowed node holds,
        the nearest sets large enough to (without them it could never
        move with its memory). Nodes as near are taken by their room
        (``free``: node -> MiB free, the guest's own pages counted free),
        the most first, then by number.
        """
        topology = self.agent.topology
        nova_nodes = set(self.agent.nova_allowed.get(domain.name, ()) or
                         range(topology.size))
        nova_cpus = set(self.agent.nova_cpus.get(domain.name, ()))
        nodes = [n.id for n in topology.nodes if n.cpus and
                 n.id in nova_nodes and
                 (not nova_cpus or nova_cpus.intersection(n.cpus))]
        sets = [(n,) for n in nodes]
        need = max(1, math.ceil(domain.vcpus / max(min(
            model.threads[n] for n in nodes), 1))) if nodes else 1
        sizes = set()
        if domain.vcpus > 1:
            sizes.update(range(2, max(2, need) + 1))
        # Sized by its memory: from as few of the largest nodes as could
        # hold it (smaller sets never have room) to as many of the
        # smallest (nodes with CPUs and memory that Nova allows it).
        memory = sorted(topology.nodes[n].memory_mb for n in nodes
                        if topology.nodes[n].memory_mb > 0)
        if memory:
            want = domain.memory_mb + self.opts.reserve_mb
            sizes.update(range(max(2, math.ceil(want / memory[-1])),
                               math.ceil(want / memory[0]) + 1))
        if sizes:
            dist = topology.distances
            for k in sorted(n for n in sizes if n <= len(nodes)):
                for seed in nodes:
                    near = sorted((n for n in nodes if n != seed),
                                  key=lambda n: (dist[seed][n],
                                                 -(free or {}).get(n, 0), n))
                    sets.append(tuple(sorted([seed] + near[:k - 1])))
        if nova_cpus:
            # The vCPUs are pinned to Nova's CPUs of the set: a set with
            # fewer of them than the guest has vCPUs (and the nodes have
            # threads) would crowd it more than the model assumes.
            def usable(nodes):
                cpus = sum(len(nova_cpus.intersection(
                    topology.nodes[n].cpus)) for n in nodes)
                threads = sum(int(model.threads[n]) for n in nodes)
                return cpus >= min(domain.vcpus, threads)
            sets = [nodes for nodes in sets if usable(nodes)]
        return sorted(set(sets))

    def plan(self, now: float) -> list:
        """The moves to make now, best first (none while the host
        settles).
        """
        if self._settling_logged(now):
            return []
        loads = self.loads()
        if not loads:
            return []
        host = self.host_model()
        model = cost.Model(host, loads)
        measured = {g.name for g in loads}
        # What the move rate lets land before the next pass; the first
        # move of a pass may be larger (one guest at a time).
        budget = self._rate() * self.opts.optimize_interval
        horizon = float(self.opts.payback_horizon)
        committed = {}
        taken = {}            # node -> MiB the moves chosen so far need
        joined = set()        # nodes the moves chosen so far join
        # Nodes a move of an earlier pass waiting for its verdict joined:
        # another move onto them would blur its verdict (guests leaving a
        # crowded node together do not). The moves of one pass may join
        # the same nodes: each is predicted with those chosen before it
        # (guests leaving a crowded node for an idle one go together, as
        # numad moves them; each verdict counts the other movers it
        # shares a node with as it counts guests leaving a node together,
        # and expects what the whole pass was predicted to do to its
        # guest); but a move that leaves the vCPUs to the kernel shares
        # no node with another of its pass (the balancer places them,
        # the part of the model least sure, over every node Nova
        # allows).
        busy = set()
        for check in self.checks.values():
            busy.update(check.nodes)
        # Nodes where a guest runs that the model cannot see yet: it would
        # take them for idle (a guest that has just started there looks
        # like room).
        busy.update(self.unseen(measured, now))
        actions = []
        movable = [d for d in self.movable(now) if d.name in measured]
        if movable:
            # Round robin where the budget ran out at the last pass.
            start = self._start % len(movable)
            movable = movable[start:] + movable[:start]
        self._views = {}      # name -> host_view(without=name), this pass
        self._left = PREDICTIONS
        reached = 0
        for _ in range(MAX_ACTIONS):
            best = None
            for i, domain in enumerate(movable):
                if self._left <= 0:
                    break
                reached = max(reached, i + 1)
                if domain.name in committed:
                    continue
                best = self._best_for(domain, model, host, committed,
                                      horizon, budget if actions else
                                      float('inf'), best, taken, busy,
                                      joined)
            if best is None:
                break
            actions.append(best)
            committed[best.guest] = best.predicted
            budget -= best.moved_mb
            if best.with_memory:
                memory = self.agent.domains[best.guest].memory_mb
                for node, share in best.predicted[1].items():
                    taken[node] = taken.get(node, 0.0) + memory * share
            if best.predicted[0] is None:
                busy.update(best.nodes)
            joined.update(best.nodes)
        for i, action in enumerate(actions):
            # What its verdict will measure: its own change and what the
            # later moves of the pass were predicted to do to it.
            action.expected = math.prod(
                later.effects.get(action.guest, 1.0)
                for later in actions[i:])
        if self._left <= 0 and movable:
            self._start += reached
            self.counts['budget'] += 1
        return actions

    def _best_for(self, domain, model, host, committed, horizon,
                  budget, best, taken=None, busy=(), joined=frozenset()):
        agent = self.agent
        name = domain.name
        state = agent.collector.guests.get(name)
        touched = sum(state.memory_mb.values()) if state else 0.0
        now_cpu, now_mem = model.now[name]
        view = self._views.get(name)
        if view is None:
            view = self._views[name] = agent.host_view(without=name)
        base_changes = dict(committed)
        without = {}
        if base_changes:
            without = model.predict(base_changes)
            self._left -= 1
        allowed = set(agent.nova_cpus.get(name, ()) or
                      agent.topology.node_of_cpu())
        pages = agent.opts.enforcement == placer_mod.PAGES
        free = dict(enumerate(view.free_mb))
        for nodes in self.candidates(domain, host, free):
            kernel = allowed.issubset(self._cpus(domain, nodes))
            if busy.intersection(nodes) or \
                    kernel and not joined.isdisjoint(nodes):
                # Left to the kernel, not onto nodes another move of the
                # pass joins either (the balancer places its vCPUs, the
                # part of the model least sure).
                continue
            target = cost.even(nodes)
            cpu = target
            if kernel:
                # Pinned to every CPU Nova allows is not pinned: the
                # kernel's load balancer places them (cpu None to the
                # model; a guest pinned to fewer nodes now floats).
                cpu = now_cpu
                if not pages and set(now_mem).issubset(nodes):
                    # And a nodeset holding all its pages moves none:
                    # nothing would change but a pinned guest's vCPUs
                    # floating, not a candidate of its own (tried on the
                    # tuning seeds, session 25: hardly ever chosen, the
                    # bar as without it).
                    continue
            room = sum(view.free_mb[n] - (taken or {}).get(n, 0.0)
                       for n in nodes)
            variants = []
            if room >= domain.memory_mb + self.opts.reserve_mb and (
                    cpu != now_cpu or
                    cost.moved_fraction(now_mem, target) >= MIN_SHIFT):
                # vCPUs and memory together.
                variants.append((target, touched * cost.moved_fraction(
                    now_mem, target), True))
            if cpu != now_cpu and _local(cpu, now_mem) > \
                    _local(now_cpu, now_mem) + MIN_SHIFT:
                # vCPUs alone, to where more of its memory is (and CPUs
                # or the LLC maybe less shared): no page moves, no room
                # needed.
                variants.append((now_mem, 0.0, False))
            for memory, moved, with_memory in variants:
                # A pass whose first move overdrew its page budget makes
                # no other, a move of vCPUs alone (no page) included:
                # letting those through was measured (session 31) at the
                # same bar on the tuning seeds, more guests below 0.90x
                # (213 instead of 191) and a lower mean (1.3616x instead
                # of 1.3634x).
                if moved > budget or self._left <= 0:
                    continue
                self._left -= 1
                changes = dict(base_changes)
                changes[name] = (None if kernel else cpu, memory)
                ratios = model.predict(changes)
                # The floor on the ratios to now: with the moves chosen
                # earlier in this pass.
                if self._below_floor(ratios):
                    continue
                effects = {g: r / without.get(g, 1.0)
                           for g, r in ratios.items()}
                deltas = [(g, r - without.get(g, 1.0))
                          for g, r in ratios.items()]
                net = self.trust * sum(d for _g, d in deltas)
                # What the neighbours would gain counts at NEIGHBOUR_GAIN,
                # what they would lose in full.
                gain = self.trust * sum(
                    d * NEIGHBOUR_GAIN if g != name and d > 0 else d
                    for g, d in deltas)
                price = moved * MOVE_COST
                # Written as what passes: a NaN (from a counter gone
                # wrong) fails it rather than slipping past each refusal.
                if not (gain > 0 and gain >= self.opts.min_gain and
                        gain * horizon >= self.opts.gain_margin * price):
                    continue
                score = gain - price / horizon
                if len(nodes) > 1:
                    # Several nodes (vCPUs with memory or alone): ranked
                    # by its net gain divided by 1 + SPREAD_MARGIN (half);
                    # the bar above stays the same.
                    score /= 1.0 + SPREAD_MARGIN
                if best is None or score > best.score:
                    best = Action(name, nodes, self._cpus(domain, nodes),
                                  gain, price, moved, changes[name],
                                  with_memory, effects, score, net)
        return best

    def _below_floor(self, effects) -> bool:
        """Whether speed changes ``effects`` (name -> after / now) would
        leave a guest they slow below ``guest_floor`` of its speed before
        the optimizer's moves since the agent started (as predicted).
        """
        floor = self.opts.guest_floor
        return floor > 0 and any(
            self.standing.get(g, 1.0) * e < floor
            for g, e in effects.items() if e < 1.0)

    def judge(self, name, cpu, before, shares) -> str | None:
        """The placer's plan for ``name`` (memory ``before`` -> ``shares``,
        both node -> MiB; vCPUs stay where they run, ``cpu``) in predicted
        time: None when it pays (or the guest is not measured yet: the
        placer's rule stands), else why not.
        """
        if not self.opts.optimize:
            return None
        loads = self.loads()
        if name not in {g.name for g in loads}:
            return None
        total = sum(shares.values())
        touched = sum(before.values())
        if total <= 0 or touched <= 0:
            return None
        target = {n: mb / total for n, mb in shares.items() if mb > 0}
        now = {n: mb / touched for n, mb in before.items() if mb > 0}
        moved = touched * cost.moved_fraction(now, target)
        if moved < touched * MIN_SHIFT:
            return None
        model = cost.Model(self.host_model(), loads)
        # Its vCPUs stay where they run: the kernel's if they float now,
        # else where they are pinned (None would unpin them: a release).
        keep = model.settled[name][0] if name in model.release else None
        gain = self.trust * model.gain({name: (keep, target)})
        price = moved * MOVE_COST
        if gain * self.opts.payback_horizon >= self.opts.gain_margin * price:
            return None
        self.counts['refused'] += 1
        return ('the cost model predicts a gain of %.3f for moving %d MiB, '
                'which does not pay it back within %d s' % (
                    gain, moved, self.opts.payback_horizon))

    def _cpus(self, domain, nodes) -> tuple:
        topology = self.agent.topology
        nova_cpus = set(self.agent.nova_cpus.get(domain.name, ()))
        cpus = [c for n in nodes for c in topology.nodes[n].cpus
                if not nova_cpus or c in nova_cpus]
        return tuple(sorted(cpus))

    # -- acting ---------------------------------------------------------------

    def _held(self, action, state, previous) -> tuple:
        """The nodes an undo of ``action`` confines the guest's memory
        to, where Nova had left it free (``previous``: the agent's
        restriction before, none): those holding MIN_SHIFT of its memory
        or more, within Nova's nodes, if none of them is one of the
        move's. Widening the nodeset to Nova's again would move no page,
        leaving them where the move put them, away from the vCPUs going
        back; narrowing it to nodes the move kept would move none either.
        () (Nova's nodes, as before) otherwise, and for vCPU moves.
        """
        if previous[0] or state is None or not action.with_memory:
            return ()
        nova = set(self.agent.nova_allowed.get(action.guest, ()) or
                   range(self.agent.topology.size))
        held = tuple(sorted(
            n for n, f in collector_mod.fractions(state.memory_mb).items()
            if f >= MIN_SHIFT and n in nova))
        if set(held) & set(action.nodes):
            return ()
        return held

    def neighbours(self, name, nodes) -> dict:
        """Guests sharing a node (vCPUs or memory) with ``nodes``."""
        out = {}
        nodes = set(nodes)
        for other, state in self.agent.collector.guests.items():
            if other == name:
                continue
            if nodes.intersection(state.cpu) or \
                    nodes.intersection(state.memory_mb):
                mean = self._mean(other, active=True)
                if mean is not None:
                    out[other] = mean.ips
        return out

    def apply(self, action: Action, now: float) -> bool:
        agent = self.agent
        domain = agent.domains.get(action.guest)
        if domain is None:
            return False
        state = agent.collector.guests.get(action.guest)
        before = self._mean(action.guest, active=True)
        previous = agent.restrictions.get(action.guest, ((), ()))
        # An undo puts the vCPUs back on the CPUs they had, else on those
        # (within Nova's) of the nodes they ran on: floating again, the
        # kernel would place them anywhere, away from the memory the
        # agent confined (measured: worse than pinning them back).
        ran_on = tuple(sorted(state.cpu)) if state else ()
        held = self._held(action, state, previous)
        undo = (tuple(previous[0]) or held,
                tuple(previous[1]) or self._cpus(domain, ran_on))
        reason = ('predicted gain %.3f (its neighbours\' gains at %g) '
                  'pays its cost %.1f guest-s back within %d s (%d MiB to '
                  'move)' % (
                      action.gain, NEIGHBOUR_GAIN, action.cost,
                      self.opts.payback_horizon, action.moved_mb))
        what = 'vCPUs and memory' if action.with_memory else 'vCPUs'
        if agent.opts.enforcement not in (placer_mod.NODESET,
                                          placer_mod.PAGES):
            key = (action.nodes, action.with_memory)
            log = LOG.debug if self.advised.get(action.guest) == key \
                else LOG.info
            self.advised[action.guest] = key
            log('Would move %(guest)s, %(what)s, to nodes %(nodes)s '
                '(enforcement=%(mode)s): %(reason)s',
                {'guest': action.guest, 'nodes': _text(action.nodes),
                 'what': what, 'mode': agent.opts.enforcement,
                 'reason': reason})
            self.counts['advised'] += 1
            self.held[action.guest] = now + HOLD
            return False
        touched = set(action.nodes) | set(state.cpu if state else ()) | \
            set(state.memory_mb if state else ())
        neighbours = self.neighbours(action.guest, touched)
        nodes = tuple(action.nodes) if action.with_memory else ()
        # The simulator's measurement, before the move; what it returns
        # is called once the move is made. Not guarded: on its error the
        # pass stops (Agent._optimize logs it) and the simulator fails
        # its run (OverheadAware.step); there is none on a real host.
        seen = self.observer(action) if self.observer is not None else None
        if action.with_memory:
            # The move replaces the pages the last one was still landing.
            self.landing.pop(action.guest, None)
        done = agent.guarded(domain, 'Optimizer move', self._move, domain,
                             nodes, action.cpus)
        if not done:
            if action.guest in agent.domains:
                self.counts['failed'] += 1
            # Not tried again at every pass: BACKOFF_BASE, doubled for
            # each failure in a row (a guest whose numatune libvirt will
            # not change live fails every time).
            self.held[action.guest] = now + self._doubled(
                self.failures, action.guest, BACKOFF_BASE)
            return False
        self.failures.pop(action.guest, None)
        if seen is not None:
            seen()
        agent.restrictions[action.guest] = (
            tuple(nodes) if nodes else tuple(previous[0]),
            tuple(action.cpus))
        # The move replaces what an undo was bringing back.
        self.returning.pop(action.guest, None)
        self._count(action.guest, 'moved')
        for name, effect in action.effects.items():
            self.standing[name] = self.standing.get(name, 1.0) * effect
        self._touch(action.guest, action.effects, now)
        agent.record(action.guest, 'optimized',
                     'ok: %s to nodes %s: %s'
                     % (what, _text(action.nodes), reason))
        settle = now + action.moved_mb / self._rate() + 1.0
        if before is not None:
            rpi = {}
            for name in (action.guest, *neighbours):
                mean = before if name == action.guest else \
                    self._mean(name, active=True)
                if mean is not None and mean.ips > 0:
                    rpi[name] = mean.rps / mean.ips
            self.checks[action.guest] = Check(
                action.guest, now, settle, before.ips, neighbours, undo,
                action.gain if action.net is None else action.net,
                tuple(action.nodes), action.moved_mb,
                self.trust, dict(action.effects), rpi,
                from_held=bool(held),
                memory_before=dict(state.memory_mb) if state and
                action.with_memory else {},
                # Its window before the move still holds a guest that has
                # left since: the neighbours' change is partly its going.
                host_changed=self.left_at is not None and
                now - self.left_at < self.opts.loop_window *
                self.opts.sample_interval,
                expected=action.expected)
        else:
            # Nothing to judge it against (measured fewer than
            # loop_window samples): left alone until it settles, counted.
            self.counts['unjudged'] += 1
            self.held[action.guest] = settle + self._hold_unjudged(
                action.guest)
            reason += ('; not judged: measured fewer than %d samples '
                       'before it' % self.opts.loop_window)
        # With its check or hold: a restarted agent leaves it alone too.
        self._write_record(domain)
        LOG.info('Moved %(guest)s, %(what)s, to nodes %(nodes)s: '
                 '%(reason)s', {'guest': action.guest, 'what': what,
                                'nodes': _text(action.nodes),
                                'reason': reason})
        agent.notify('numa_overhead.optimize', {
            'guest': action.guest, 'nodes': list(action.nodes),
            'memory': action.with_memory,
            'predicted_gain': action.gain, 'cost': action.cost,
            'moved_mb': action.moved_mb, 'judged': before is not None})
        self._raise_lost()
        return True

    def _move(self, domain, nodes, cpus) -> bool:
        """vCPUs to ``cpus``; memory to ``nodes`` (() = where it is),
        evened over them with ``enforcement = pages`` (restricting the
        nodeset moves only the pages outside it): a first step now, the
        rest a step each cycle within the page budget (``landing``).
        """
        hv = self.agent.hv
        restrictions = self.agent.restrictions
        previous = restrictions.get(domain.name, ((), ()))
        hv.pin_vcpus(domain, cpus)
        # In force from now on, whatever happens next: what is restored
        # before a migration or when the agent steps back.
        restrictions[domain.name] = (tuple(previous[0]), tuple(cpus))
        if not nodes:
            return True
        error = None
        try:
            hv.set_nodeset(domain, nodes)
        except (hv_mod.DomainGone, hv_mod.HypervisorUnavailable):
            raise
        except Exception as exc:
            error = exc
        if error is not None:
            # Its vCPUs on the new nodes, its memory on the old ones: not
            # the move chosen, and no verdict would come. The vCPUs go
            # back where they were.
            self._vcpus_back(domain, previous)
            raise error
        if self.agent.opts.enforcement == placer_mod.PAGES:
            agent = self.agent
            state = agent.collector.guests.get(domain.name)
            touched = sum(state.memory_mb.values()) if state else 0.0
            # As long as its pages take at the page rate twice over, and
            # EXPIRE more: a landing the page budget starves ends.
            land = Return(cost.even(nodes), landing=True,
                          until=agent.clock() + 2.0 * touched /
                          self._rate() + EXPIRE)
            # A first step that fails leaves the move standing (its
            # vCPUs and nodeset are set): its pages go on landing.
            if self._landing_step(domain, land) == '':
                self.landing[domain.name] = land
        return True

    def _vcpus_back(self, domain, previous) -> None:
        """The vCPUs of a move whose memory step failed back to
        ``previous[1]`` (() = Nova's CPUs); on a failure here too, the
        pins stay and say so in ``restrictions``.
        """
        agent = self.agent
        try:
            self._pin_back(domain, previous[1])
        except (hv_mod.DomainGone, hv_mod.HypervisorUnavailable):
            raise
        except Exception as exc:
            LOG.warning('Putting the vCPUs of %(guest)s back after a '
                        'failed move failed too (%(exc)s): they stay on '
                        'CPUs %(cpus)s', {
                            'guest': domain.name, 'exc': exc,
                            'cpus': _text(agent.restrictions.get(
                                domain.name, ((), ()))[1])})
            return
        agent.restrictions[domain.name] = (tuple(previous[0]),
                                           tuple(previous[1]))

    def _landing_step(self, domain, land) -> str:
        """One step of a move's pages landing (:meth:`_step_back`): ''
        while under way, else why it ended. A step that fails (logged) or
        reads none of the guest's memory, a libvirt or /proc hiccup, is
        tried again next cycle, RETURN_STALLS times in a row at most.
        """
        why = self.agent.guarded(domain, 'Moving pages of a move',
                                 self._step_back, domain, land)
        if why is None or why == NO_MEMORY:
            land.failures += 1
            if land.failures < RETURN_STALLS:
                return ''
            return ('failed or read no memory in %d steps in a row'
                    % RETURN_STALLS)
        land.failures = 0
        return why

    # -- the closed loop ------------------------------------------------------

    def verdicts(self, now: float) -> list:
        """Keep or undo the moves whose pages have landed."""
        out = []
        for name, check in list(self.checks.items()):
            if name in self.agent.migrating:
                # Nova's placement is back for the migration: nothing to
                # judge, nothing to undo.
                del self.checks[name]
                self.counts['expired'] += 1
                continue
            if name in self.landing:
                # Its pages are still on their way: judged once they
                # have landed (bring_back moves the settle time).
                continue
            if now < check.settle:
                continue
            after = self._mean(name, since=check.settle, active=True)
            if after is None:
                if now > check.settle + self._expire():
                    # No progress measured since: no verdict, and its
                    # nodes are open again.
                    del self.checks[name]
                    self.counts['expired'] += 1
                continue
            del self.checks[name]
            rpi = _changed(check.rpi.get(name), after)
            if rpi is not None:
                # Its workload changed while its pages moved: its progress
                # says nothing of the move.
                self._unjudged(check, after, rpi, now)
                out.append((name, 'unjudged'))
                continue
            own = after.ips / check.before if check.before > 0 else 1.0
            # Guests started or gone since the move: the neighbours'
            # change is theirs more than the move's.
            came = check.host_changed
            if came:
                changes, before_n, after_n, measured = [], 0.0, 0.0, {}
            else:
                changes, before_n, after_n, measured = \
                    self._neighbourhood(check)
            changes.insert(0, own - 1.0)
            hood = after_n / before_n if before_n > 0 else None if came \
                else 1.0
            # Judged as it was chosen: the sum of the guests' relative
            # changes (it and the guests on the nodes it left or joined);
            # and neither the guest itself much slower nor those nodes'
            # instructions per second, all guests together, fewer. On the
            # guest alone (came): its own loss within the threshold.
            net = sum(changes)
            total = (after.ips + after_n) / (check.before + before_n) \
                if check.before + before_n > 0 else 1.0
            threshold = self.opts.undo_threshold
            # Predicted to gain, it lost beyond the threshold: the model
            # misjudged the guest it moved, and the neighbours' measured
            # gains (the noisiest part of a verdict, other moves in them)
            # do not keep the move.
            misjudged = check.own_expected() > 1.0 + CALIBRATION_BAND and \
                own < 1.0 - threshold
            summed = net >= -threshold and total >= 1.0 - threshold and \
                own >= 1.0 - WORST_FACTOR * threshold
            if summed and misjudged:
                # Counted: the sum alone would have kept it.
                self.counts['misjudged'] += 1
            try:
                if summed and not misjudged:
                    self._keep(check, own, hood, now)
                    out.append((name, 'kept'))
                elif (stranded := self._stranded(check)) is not None:
                    self._keep(check, own, hood, now, stranded)
                    out.append((name, 'kept'))
                else:
                    undone = self._undo(check, own, hood, now)
                    out.append((name, 'undone' if undone else
                                'undo failed'))
            except hv_mod.HypervisorUnavailable:
                if not check.final:
                    # The undo was not made: judged again once libvirt
                    # is back.
                    self.checks[name] = check
                    raise
            # Learned and counted once the verdict is final: a record
            # that could not be written (libvirt lost) is written again
            # at the next step, the verdict not taken again.
            self._learned(check, net, came, now)
            self._calibrate(check, own, measured, now, came)
            self._raise_lost()
        return out

    def _learned(self, check, net, came, now) -> None:
        """What a verdict teaches the trust, and its counts."""
        name = check.guest
        if came:
            self.counts['host_changed'] += 1
        if not came:
            self._learn(net, check.predicted, check.trust, now)
        elif check.effects.get(name, 1.0) > 1.0:
            # Its own change against its own predicted one.
            self._learn(net, check.trust * (
                check.effects[name] - 1.0), check.trust, now)
        if not came and net * self.opts.payback_horizon < \
                check.moved_mb * MOVE_COST:
            # What it gained did not pay for its pages: counted (not
            # known when the neighbours were left out).
            self.counts['unpaid'] += 1

    def _undo_nodes(self, check, domain, view=None) -> tuple:
        """The nodes an undo of ``check`` confines the guest's memory to
        (() = Nova's nodes): those of ``check.undo`` while they still have
        room for it (the move freed them; others may have filled them
        since); else Nova's nodes where the undo would have confined it to
        the nodes that held it, and the nodes it is confined to now where
        the agent had confined it before the move. ``view``: the host view
        without the guest, if at hand.
        """
        nodes = check.undo[0]
        if nodes and domain is not None:
            if view is None:
                view = self.agent.host_view(without=check.guest)
            room = sum(view.free_mb[n] for n in nodes
                       if 0 <= n < len(view.free_mb))
            if room < domain.memory_mb + self.opts.reserve_mb:
                nodes = () if check.from_held else \
                    self.agent.restrictions.get(check.guest, ((), ()))[0]
        return tuple(nodes)

    def _stranded(self, check) -> tuple | None:
        """(MiB, of MiB) of the guest's memory before ``check``'s move
        that an undo would bring back to where it was, where that is less
        than STRANDED of it: the undo would pin its vCPUs back there with
        most of its pages left on the move's nodes, a placement never
        measured and mostly remote. What comes back: all of it where the
        undo narrows its nodeset to nodes with room for it (the kernel
        moves the pages); where it gives Nova's nodes back with
        ``enforcement = pages``, as much as each of those nodes has room
        for besides ``reserve_mb`` and what others have yet to touch (as
        the pages going back are paced, :meth:`_step_back`); otherwise
        (a nodeset widened without page moves, or left on the move's
        nodes) only what is still there. None otherwise, and for a move of
        its vCPUs alone.
        """
        agent = self.agent
        before = check.memory_before
        total = sum(before.values())
        domain = agent.domains.get(check.guest)
        state = agent.collector.guests.get(check.guest)
        if total <= 0 or domain is None or state is None:
            return None
        view = agent.host_view(without=check.guest)
        nodes = self._undo_nodes(check, domain, view)
        current = tuple(agent.restrictions.get(check.guest, ((), ()))[0])
        if nodes and nodes != current:
            return None
        now = state.memory_mb
        free = view.free_mb
        paced = not nodes and agent.opts.enforcement == placer_mod.PAGES
        allowed = set(agent.nova_allowed.get(check.guest, ()) or
                      range(agent.topology.size))
        back = 0.0
        for node, mb in before.items():
            here = now.get(node, 0.0)
            if paced and node in allowed and 0 <= node < len(free):
                # The view counts its own pages as free: room for them.
                here = max(free[node] - self.opts.reserve_mb, here)
            back += min(mb, here)
        return (back, total) if back < STRANDED * total else None

    def _neighbourhood(self, check) -> tuple:
        """The neighbours' relative changes since ``check``'s move, their
        instructions per second before and after, summed, and name ->
        speed after / before.
        """
        changes = []
        measured = {}
        before = after = 0.0
        for other, ips in check.neighbours.items():
            mean = self._mean(other, since=check.settle, active=True)
            if mean is None or ips <= 0 or \
                    _changed(check.rpi.get(other), mean) is not None:
                # Not measured since, or its workload changed: not the
                # move's doing either way.
                continue
            before += ips
            after += mean.ips
            measured[other] = mean.ips / ips
            changes.append(mean.ips / ips - 1.0)
        return changes, before, after, measured

    def _touch(self, mover, effects, now) -> None:
        """Remember that a move (or undo) of ``mover`` at ``now`` was
        predicted to change the speed of the guests of ``effects``: the
        verdicts of other moves leave them out of calibration() while it
        lies inside their window.
        """
        for name, effect in effects.items():
            if abs(effect - 1.0) > CALIBRATION_BAND:
                self.changed_by.setdefault(name, collections.deque()).append(
                    (now, mover))

    def _forget_changes(self, now) -> None:
        """Drop the moves no verdict still to come can look back to
        (once a cycle, while every pending check is there).
        """
        oldest = min([c.at for c in self.checks.values()] + [now]) - \
            self.opts.loop_window * self.opts.sample_interval
        for name, times in list(self.changed_by.items()):
            while times and times[0][0] < oldest:
                times.popleft()
            if not times:
                del self.changed_by[name]

    def _overlapped(self, name, check, now) -> bool:
        """Whether another guest's move or undo was predicted to change
        ``name`` between the window before ``check``'s move and its
        verdict: its measured change is partly that move's.
        """
        since = check.at - self.opts.loop_window * \
            self.opts.sample_interval
        return any(since <= at < now and mover != check.guest
                   for at, mover in self.changed_by.get(name, ()))

    def _calibrate(self, check, own, measured, now, came=False) -> None:
        """Keep what ``check``'s move was predicted to do to the speed of
        its guest (measured: ``own``) and of its neighbours (``measured``:
        name -> speed after / before, those the verdict weighed) beside
        what was measured; not for a guest another move or undo was
        predicted to change meanwhile (the comparison would be another's
        too), nor at all across a guest starting or leaving (``came``).
        """
        if came:
            return
        kept = 0
        if not self._overlapped(check.guest, check, now):
            self.predictions['guest'].append(
                (check.effects.get(check.guest, 1.0), own))
            kept = 1
        for other, ratio in measured.items():
            if not self._overlapped(other, check, now):
                self.predictions['neighbours'].append(
                    (check.effects.get(other, 1.0), ratio))
        self.counts['calibrated'] += kept
        if kept and self.counts['calibrated'] % CALIBRATION_LOG == 0:
            # How far the model fits this host, now and then: what an
            # operator needs to judge its moves (and the trust).
            LOG.info('Cost model at the last %(n)d verdicts (trust '
                     '%(trust).2f): %(text)s',
                     {'n': len(self.predictions['guest']),
                      'trust': self.trust,
                      'text': calibration_text(self.calibration())})

    def export_state(self) -> dict:
        """What this host taught the optimizer of the cost model's fit,
        for :mod:`.model_state`: the trust as the last verdict that
        taught it left it (``learned_trust``, not what it has recovered
        to since), when (``learned_at``, wall clock; None: no verdict
        here) and the (predicted, measured) pairs of the recent verdicts.
        """
        return {'trust': self.learned_trust,
                'learned_at': self.learned_at,
                'predictions': {kind: list(pairs) for kind, pairs in
                                self.predictions.items()}}

    def import_state(self, state: dict, idle: float = 0.0,
                     learned_at: float | None = None) -> None:
        """:meth:`export_state`'s output of an earlier run of the agent
        on this host (checked by :func:`.model_state.validate`), whose
        trust a verdict taught ``idle`` seconds ago, at ``learned_at``
        (wall clock; None: not known): the time since counts towards
        its recovery, the agent stopped or not.
        """
        idle = float(idle)
        # Not a time (NaN) or a clock set back: none; forever: 1e12 s.
        idle = min(idle, 1e12) if idle >= 0 else 0.0
        self.learned_trust = min(max(float(state['trust']), TRUST_MIN),
                                 1.0)
        self.trust = self.learned_trust
        self.learned_at = learned_at
        self.recovering = False
        now = self.agent.clock()
        self.trust_since = now - idle
        self._recover_trust(now)
        for kind, pairs in self.predictions.items():
            pairs.clear()
            pairs.extend(tuple(p) for p in state['predictions'][kind])

    def calibration(self) -> dict:
        """How the cost model's predictions of the recent verdicts came
        true: kind (``guest``: the moved guests; ``neighbours``: the
        guests on the nodes they left or joined) -> calibration_summary.
        """
        return {kind: calibration_summary(pairs)
                for kind, pairs in self.predictions.items()}

    def _hold_unjudged(self, name) -> float:
        """Seconds ``name`` is left alone after a move with no verdict:
        HOLD, doubled for each such move in a row (a guest whose workload
        keeps changing, or that keeps restarting, is not moved again and
        again unjudged), at most BACKOFF_MAX.
        """
        return self._doubled(self.unjudged_run, name, HOLD)

    @staticmethod
    def _doubled(runs: dict, name, base: float) -> float:
        """``base`` doubled for each one ``runs`` counts of ``name``, at
        most BACKOFF_MAX; one more counted.
        """
        run = runs.get(name, 0)
        # Counted no further than BACKOFF_MAX needs (2 ** 1024 overflows).
        runs[name] = min(run + 1, BACKOFF_UNDOS_MAX)
        return min(base * 2 ** min(run, BACKOFF_UNDOS_MAX), BACKOFF_MAX)

    def _unjudged(self, check, after, rpi, now) -> None:
        self.counts['unjudged'] += 1
        self.counts['workload_changed'] += 1
        self.held[check.guest] = now + self._hold_unjudged(check.guest)
        before, now_rpi = rpi
        own = after.ips / check.before if check.before > 0 else 1.0
        text = ('not judged: its workload changed (LLC references per '
                'instruction %.4f -> %.4f; progress %+.1f%%)' % (
                    before, now_rpi, (own - 1) * 100))
        self._tell(check, text, 'numa_overhead.optimize.unjudged', {
            'progress': own, 'reason': 'workload changed',
            'rpi_before': before, 'rpi_after': now_rpi})

    def _expire(self) -> float:
        """Seconds after a move's pages landed that its verdict may wait
        for a window of progress: EXPIRE, or twice what ``loop_window``
        samples take where that is longer.
        """
        return max(EXPIRE, 2.0 * self.opts.loop_window *
                   self.opts.sample_interval)

    def _write_record(self, domain) -> None:
        """The guest's record (:meth:`Agent.write_record`). Libvirt lost
        meanwhile does not undo what was done: the record is written
        again at the next step (``unwritten``) and the loss raised once
        the caller has finished (:meth:`_raise_lost`).
        """
        try:
            self.agent.write_record(domain)
        except hv_mod.HypervisorUnavailable as exc:
            self.unwritten.add(domain.name)
            if self._lost is None:
                self._lost = exc
            return
        self.unwritten.discard(domain.name)

    def _raise_lost(self) -> None:
        lost, self._lost = self._lost, None
        if lost is not None:
            raise lost

    def _tell(self, check, text, event, payload) -> None:
        """A verdict that leaves the move in place (kept, or not
        judged): the guest's record, a log line and a notification.
        """
        self.agent.record(check.guest, 'optimized', 'ok: ' + text)
        domain = self.agent.domains.get(check.guest)
        if domain is not None:
            self._write_record(domain)
        LOG.info('Move of %(guest)s to nodes %(nodes)s %(text)s',
                 {'guest': check.guest, 'nodes': _text(check.nodes),
                  'text': text})
        self.agent.notify(event, dict(payload, guest=check.guest))

    def _recover_trust(self, now) -> None:
        """TRUST_IDLE seconds after the last verdict that taught it (or
        the agent's start), the trust goes back towards TRUST_START from
        what that verdict left (TRUST_HALF_LIFE). Not while a move awaits
        its verdict: the time it waits does not count (the trust stays
        what it was when the move was chosen, so that the moves of the
        next passes are not chosen on a trust that verdict may lower).
        Nothing to write: the state file keeps what the verdict taught
        and when.
        """
        if self.trust_since is None:
            self.trust_since = now
        last, self._recovered_at = self._recovered_at, now
        if self.checks and last is not None and now > last:
            self.trust_since += now - last
        if self.learned_trust >= TRUST_START:
            return
        idle = now - self.trust_since - TRUST_IDLE
        if idle <= 0:
            return
        if not self.recovering and round(self.learned_trust, 2) < 1.0:
            LOG.info('No verdict has taught the trust in the cost model '
                     'for over %(idle)d s: it goes back from %(trust).2f '
                     'towards %(start).1f, half the way every %(half)d s, '
                     'so that the optimizer tries the model again',
                     {'idle': TRUST_IDLE, 'trust': self.learned_trust,
                      'start': TRUST_START, 'half': TRUST_HALF_LIFE})
        self.recovering = True
        self.trust = recovered(self.learned_trust, idle)

    def _learn(self, net, predicted, trust, now) -> None:
        if predicted <= 0 or trust <= 0:
            return
        # The gain this move was chosen for was scaled by the trust of its
        # time: compare with what the model itself said.
        came_true = min(max(net / (predicted / trust), 0.0), 1.0)
        self.trust = max(TRUST_MIN, (1 - TRUST_WEIGHT) * self.trust +
                         TRUST_WEIGHT * came_true)
        self.learned_trust = self.trust
        self.trust_since = now
        self.learned_at = time.time()
        self.recovering = False

    def _keep(self, check, own, hood, now, stranded=None) -> None:
        """Keep ``check``'s move. ``stranded``: (MiB, of MiB) from
        :meth:`_stranded`, a move that made things worse but whose undo
        would strand the guest's vCPUs away from its pages: kept, and the
        guest backed off as after an undo.
        """
        check.final = True
        self._count(check.guest, 'kept')
        self.unjudged_run.pop(check.guest, None)
        text = 'kept: ' + _judged(own, hood, check)
        payload = {'progress': own, 'neighbours': hood,
                   'stranded': stranded is not None}
        if stranded is None:
            undos, _until = self.backoff.get(check.guest, (0, 0.0))
            if undos:
                self.backoff[check.guest] = (max(0, undos - 1), 0.0)
            self.held[check.guest] = now + HOLD
        else:
            self.counts['stranded'] += 1
            wait = self._back_off(check.guest, now)
            text += ('; not undone: %d of the %d MiB it had where it ran '
                     'would come back (an undo would run its vCPUs away '
                     'from most of its pages); left alone for %d s'
                     % (stranded[0], stranded[1], wait))
            payload['backoff_s'] = wait
        self._tell(check, text, 'numa_overhead.optimize.kept', payload)

    def _back_off(self, name, now) -> float:
        """Leave ``name`` alone after an undo (or a move its undo would
        have stranded): BACKOFF_BASE seconds, doubled for each earlier
        one it counts, at most BACKOFF_MAX; one more counted. The wait.
        """
        undos, _until = self.backoff.get(name, (0, 0.0))
        undos = min(undos, BACKOFF_UNDOS_MAX)
        wait = min(BACKOFF_BASE * 2 ** undos, BACKOFF_MAX)
        self.backoff[name] = (undos + 1, now + wait)
        return wait

    def _undo(self, check, own, hood, now) -> bool:
        agent = self.agent
        text = _judged(own, hood, check)
        domain = agent.domains.get(check.guest)
        cpus = check.undo[1]
        nodes = self._undo_nodes(check, domain)
        restored = [None]
        done = domain is not None and agent.guarded(
            domain, 'Undoing a move', self._restore, domain, nodes, cpus,
            restored)
        check.final = True
        wait = self._back_off(check.guest, now)
        if not done:
            self.counts['undo_failed'] += 1
            if domain is not None:
                self._write_record(domain)
            return False
        agent.restrictions[check.guest] = restored[0]
        if not nodes and check.memory_before and \
                agent.opts.enforcement == placer_mod.PAGES:
            # Nova's nodes again: widening a nodeset moves no page (a
            # narrowing makes the kernel move those outside it). Its pages
            # go back towards where they were, a step each cycle.
            shares = collector_mod.fractions(check.memory_before)
            if shares:
                self.returning[check.guest] = Return(shares)
        self._count(check.guest, 'undone')
        self.unjudged_run.pop(check.guest, None)
        for name, effect in check.effects.items():
            # The move is taken back: so is what it was predicted to do.
            if name in self.standing and effect > 0:
                self.standing[name] /= effect
        self._touch(check.guest, check.effects, now)
        if check.guest in self.returning:
            text += '; its pages go back to nodes %s' % _text(sorted(
                self.returning[check.guest].shares))
        agent.record(check.guest, 'undone',
                     'ok: back where it ran: %s; left alone %d s' % (
                         text, wait))
        self._write_record(domain)
        LOG.info('Undid the move of %(guest)s to nodes %(nodes)s: '
                 '%(text)s; left alone for %(wait)d s',
                 {'guest': check.guest, 'nodes': _text(check.nodes),
                  'text': text, 'wait': wait})
        agent.notify('numa_overhead.optimize.undone', {
            'guest': check.guest, 'progress': own, 'neighbours': hood,
            'backoff_s': wait})
        return True

    def _pin_back(self, domain, cpus) -> None:
        """vCPUs on ``cpus``, or Nova's (floating again) for ()."""
        if cpus:
            self.agent.hv.pin_vcpus(domain, cpus)
        else:
            self.agent.hv.restore(domain, None,
                                  self.agent.nova_cpus.get(domain.name, ()))

    def _restore(self, domain, nodes, cpus, restored) -> bool:
        """vCPUs back to ``cpus`` (() = Nova's: floating again), memory
        to ``nodes`` (() = Nova's nodes). ``restored[0]``: the agent's
        restriction now.
        """
        agent = self.agent
        self._pin_back(domain, cpus)
        # The vCPUs are back whatever happens next.
        now = agent.restrictions.get(domain.name, ((), ()))
        agent.restrictions[domain.name] = (tuple(now[0]), tuple(cpus))
        if nodes:
            agent.hv.set_nodeset(domain, nodes)
        else:
            agent.hv.restore(domain,
                             agent.nova_allowed.get(domain.name, ()), None)
        restored[0] = (tuple(nodes), tuple(cpus))
        return True

    # -- pages back after an undo ---------------------------------------------

    def bring_back(self) -> None:
        """One step of every move's pages still landing, then of every
        pages-back an undo left (:meth:`_step_back`), within the page
        budget of this cycle.
        """
        agent = self.agent
        now = agent.clock()
        for name, land in list(self.landing.items()):
            domain = agent.domains.get(name)
            if domain is None or name in agent.migrating:
                del self.landing[name]
                continue
            if now > land.until:
                why = 'not all there in time'
            else:
                why = self._landing_step(domain, land)
            if why == '':
                continue
            del self.landing[name]
            check = self.checks.get(name)
            if check is not None:
                # Its verdict measures from when they have landed.
                check.settle = max(check.settle, now + 1.0)
            LOG.info('Pages of %(guest)s moved to nodes %(nodes)s: '
                     '%(why)s (%(mb)d MiB)', {
                         'guest': name, 'why': why,
                         'nodes': _text(sorted(land.shares)),
                         'mb': land.moved_mb})
        for name, back in list(self.returning.items()):
            domain = agent.domains.get(name)
            if domain is None or name in agent.migrating or \
                    name in self.checks:
                del self.returning[name]
                continue
            why = agent.guarded(domain, 'Moving pages back',
                                self._step_back, domain, back)
            if why is None:
                # Failed (logged): the undo stands, the pages stay.
                self.returning.pop(name, None)
            elif why:
                del self.returning[name]
                LOG.info('Pages of %(guest)s moved back after its undo: '
                         '%(why)s (%(mb)d MiB)', {
                             'guest': name, 'why': why,
                             'mb': back.moved_mb})

    def _step_back(self, domain, back) -> str:
        """Move pages of ``domain`` towards ``back.shares`` (node ->
        fraction before the undone move), as far as the page budget allows
        now and each node has room for, besides what other guests have yet
        to touch and ``reserve_mb``. '' while under way; why it ended:
        within MIN_SHIFT of them, nothing more can move, or no nearer for
        RETURN_STALLS steps that queued pages (something, the kernel's
        balancing or the guest itself, moves them away as fast: the agent
        does not chase them). Also the steps of a move's pages landing
        (``back.shares``: its even shares).
        """
        shares = back.shares
        agent = self.agent
        name = domain.name
        allowed = set(agent.nova_allowed.get(name, ()) or
                      range(agent.topology.size))
        now = {n: mb for n, mb in agent.placer.memory_now(
            domain, {}).items() if n in allowed}
        touched = sum(now.values())
        if touched <= 0:
            return NO_MEMORY
        view = agent.host_view(without=name)
        target = {}
        for node, share in shares.items():
            if node not in allowed or not 0 <= node < len(view.free_mb):
                continue
            # The view counts its own pages as free: room for it there.
            room = max(view.free_mb[node] - self.opts.reserve_mb,
                       now.get(node, 0.0))
            target[node] = min(touched * share, room)
        # What cannot land stays where it is (on the nodes it is on).
        for node, mb in now.items():
            if node not in target:
                target[node] = 0.0
        moves = placer_mod.moves_towards(now, target)
        mb = sum(m[2] for m in moves)
        if mb < touched * MIN_SHIFT:
            return 'there, as far as its nodes have room'
        if back.left is not None and mb >= back.left:
            # Pages in flight may land later (an asynchronous backend):
            # a few steps before giving up; a step the page budget left
            # without pages is no stall.
            # Nor one that finds pages outside a move's nodes: the
            # kernel is still moving them (or cannot: ``until``).
            if back.queued and not (back.landing and any(
                    now[n] > 0 for n in now if n not in shares)):
                back.stalls += 1
            if back.stalls >= RETURN_STALLS:
                return 'no nearer in %d steps' % RETURN_STALLS
        else:
            back.stalls = 0
            back.left = mb
        back.queued = False
        pages = agent.pages_allowed(mb)
        if pages <= 0:
            return ''
        try:
            result = agent.hv.move_pages(domain, moves, pages)
        except Exception:
            # Nothing moved: the budget it took goes back.
            agent.rate.give_back(pages * placer_mod.page_mb())
            raise
        agent.count_failures(result.failed)
        # What did not move goes back to the budget.
        agent.rate.give_back((pages - result.moved) * placer_mod.page_mb())
        back.queued = True
        moved = result.moved * placer_mod.page_mb()
        back.moved_mb += moved
        if moved >= mb - 1.0 and not result.failed:
            return 'there, as far as its nodes have room'
        if moved <= 0 and result.failed:
            return 'no page could move'
        # Under way; none found where they were is a stall (on their way
        # already).
        return ''

    def status(self) -> dict:
        """Counts of moves and verdicts since the agent started."""
        return {'moved': self.counts['moved'], 'kept': self.counts['kept'],
                'undone': self.counts['undone'],
                'advised': self.counts['advised'],
                'unpaid': self.counts['unpaid'],
                'refused': self.counts['refused'],
                'expired': self.counts['expired'],
                'unjudged': self.counts['unjudged'],
                'workload_changed': self.counts['workload_changed'],
                'host_changed': self.counts['host_changed'],
                'stranded': self.counts['stranded'],
                'misjudged': self.counts['misjudged'],
                'failed': self.counts['failed'] +
                self.counts['undo_failed'],
                'waiting': len(self.checks),
                'backing_off': sum(1 for _u, until in self.backoff.values()
                                   if until > self.agent.clock()),
                'returning': len(self.returning),
                'landing': len(self.landing),
                'shifting': sum(1 for since in self.shift_since.values()
                                if self.agent.clock() - since < SHIFT_MAX),
                'settling_s': round(self.settle_left(self.agent.clock())),
                'trust': round(self.trust, 3),
                'learned_miss_cost': len(self.per_miss)}


def calibration_summary(pairs) -> dict:
    """``pairs`` of (predicted, measured) speed after / before (those
    with a predicted speed of 0 or less left out): their count
    (``judged``), the measured speed in % above or below the predicted
    one (``median``, ``p10``, ``p90``), and how many were measured more
    than CALIBRATION_MISS % below (``below``) or above (``above``) it; of
    those predicted to lose more than CALIBRATION_BAND
    (``predicted_loss``) and to gain more than it (``predicted_gain``),
    how many were measured more than CALIBRATION_MISS % below the
    prediction.
    """
    pairs = [(p, m) for p, m in pairs if p > 0]

    def miss(p, m):
        return 100.0 * (m / p - 1.0)

    errors = [miss(p, m) for p, m in pairs]
    out = {'judged': len(errors)}
    if not errors:
        return out
    out.update({
        'median': round(samples_mod.percentile(errors, 50), 2),
        'p10': round(samples_mod.percentile(errors, 10), 2),
        'p90': round(samples_mod.percentile(errors, 90), 2),
        'below': sum(1 for e in errors if e < -CALIBRATION_MISS),
        'above': sum(1 for e in errors if e > CALIBRATION_MISS)})
    for key, chosen in (
            ('predicted_loss',
             [(p, m) for p, m in pairs if p < 1.0 - CALIBRATION_BAND]),
            ('predicted_gain',
             [(p, m) for p, m in pairs if p > 1.0 + CALIBRATION_BAND])):
        out[key] = {'judged': len(chosen), 'below': sum(
            1 for p, m in chosen if miss(p, m) < -CALIBRATION_MISS)}
    return out


def calibration_text(c: dict, measured: str = 'measured') -> str:
    """Optimizer.calibration()'s summaries in words ('' when there is no
    verdict to compare predictions with); ``measured``: what the other
    side of the pairs is.
    """
    parts = []
    for kind, label in (('guest', 'moved guests'),
                        ('neighbours', 'their neighbours')):
        s = c.get(kind) or {}
        if not s.get('judged'):
            continue
        loss, gain = s['predicted_loss'], s['predicted_gain']
        parts.append(
            '%s %d, %s speed relative to predicted: median %+.1f%% '
            '(p10 %+.1f%%, p90 %+.1f%%), more than %.0f%% below the '
            'prediction in %d, above in %d; of %d predicted to lose more '
            'than %.1f%%, %d more than %.0f%% below; of %d predicted to '
            'gain more, %d' % (
                label, s['judged'], measured, s['median'], s['p10'], s['p90'],
                CALIBRATION_MISS, s['below'], s['above'], loss['judged'],
                100 * CALIBRATION_BAND, loss['below'], CALIBRATION_MISS,
                gain['judged'], gain['below']))
    return '; '.join(parts)


def _changed(rpi, mean) -> tuple | None:
    """(before, now) where a guest's LLC references per instruction went
    from ``rpi`` to ``mean``'s by PHASE or more either way and across the
    memory-intensive threshold: another phase of its workload. None where
    not (or not known: no value, no instructions, or a zero, which a
    missing event also reads as).
    """
    if rpi is None or mean is None or mean.ips <= 0:
        return None
    now = mean.rps / mean.ips
    if rpi <= 0 or now <= 0 or \
            cost.intensive(rpi) == cost.intensive(now):
        return None
    if max(rpi, now) < PHASE * min(rpi, now):
        return None
    return (rpi, now)


def _judged(own, hood, check) -> str:
    """A verdict's figures: the guest's progress beside its predicted
    one, its neighbours' (None: left out, guests started or left since
    the move), the move's predicted gain.
    """
    if hood is None:
        neighbours = 'its neighbours not judged (guests started or left)'
    else:
        neighbours = 'its neighbours %+.1f%%' % ((hood - 1) * 100)
    predicted = (check.own_expected() - 1) * 100
    return ('progress %+.1f%% (predicted %+.1f%%), %s (move\'s predicted '
            'gain %.3f, trust-scaled)' % ((own - 1) * 100, predicted,
                                          neighbours, check.predicted))


def _local(cpu: dict, memory: dict) -> float:
    """Share of a guest's memory on the nodes its vCPUs run on."""
    return sum(f for node, f in memory.items() if node in cpu)


def _text(nodes) -> str:
    return ','.join(str(n) for n in nodes)


def recovered(trust: float, idle: float) -> float:
    """``trust`` after ``idle`` seconds of recovery (TRUST_HALF_LIFE;
    none for ``idle`` <= 0).
    """
    if idle <= 0 or trust >= TRUST_START:
        return trust
    return TRUST_START - (TRUST_START - trust) * 0.5 ** (
        idle / TRUST_HALF_LIFE)
