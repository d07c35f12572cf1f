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
"""A simulated host's memory as the kernel manages it.

Physics the policies cannot bypass:

* **Capacity.** Every memory controller owns a fixed part of its node's
  memory; a page is only ever placed or moved where there is room.
  Pages are allocated when the guest first touches them (at
  ``touch_mb_per_s`` from its start, or at once for a preallocating
  guest), on the node the guest's policy or first touch asks for, then
  the nearest nodes with room (the kernel's zonelist), within the nodes
  its cpuset allows. A guest that cannot get its memory within the nodes
  it is confined to is killed (the cgroup's OOM killer), and counted.
* **Migration takes time.** Every page move (a policy's move_pages or
  migrate_pages, a cpuset change, the kernel's NUMA balancing) joins one
  queue, drained at ``MIGRATE_MB_PER_S``; the bytes moved load the source
  and destination controllers and the link, and the guest loses vCPU
  time per MiB moved (``FAULT_PATH_MS_PER_MB`` when its own vCPUs migrate
  the pages in their fault path, as NUMA balancing does;
  ``REMOTE_MS_PER_MB`` when another task moves them and the guest only
  takes the TLB shootdowns and faults on pages in flight).
* **The CPU scheduler.** A guest whose vCPUs float over the host (a Nova
  guest without pinning) is placed by the kernel: a node whose vCPUs
  need more than its physical cores while another node has an idle core
  gives one up (the load balancer spreads over idle cores before SMT
  siblings; closest node first); with no idle core left, the node with
  the most runnable vCPUs per CPU (hardware thread) gives vCPUs to the one
  with the fewest while it has more than ``IMBALANCE_PCT`` percent of its
  (the kernel's ``imbalance_pct`` between NUMA nodes); a node whose vCPUs
  are all pinned gives none. Load is counted in vCPUs, each as heavy as
  another (the kernel weighs each guest's cgroup). NUMA balancing moves
  the guest's vCPUs to the node holding most of its memory when that node
  has the cores for them. vCPUs a scenario or a policy placed on nodes
  stay there, with their split by CPU count even where they may run on
  several nodes (the kernel would balance them within); vCPUs pinned to
  every CPU of the host float.
* **Automatic NUMA balancing** (on by default, as on real multi-node
  hosts): every scan period the kernel samples ``SCAN_MB`` of a guest's
  memory and migrates the sampled pages that sit away from the node its
  vCPUs run on (when most of them run on one node) to that node, if the
  cpuset allows it and the node has room. The scan period starts at 1 s
  and doubles up to 60 s while most of the guest's pages are local,
  halving again when they are not (``task_numa_work`` and
  ``update_task_scan_period`` of kernel 6.1). Guests with an interleave
  memory policy are left alone.

The numbers are documented assumptions (doc/source/user/simulator.rst,
threats to validity), not measurements of any one machine.
"""

import copy
import dataclasses

import numpy

from nova_numa_overhead.sim import model

MIGRATE_MB_PER_S = 2048.0
FAULT_PATH_MS_PER_MB = 1.0
REMOTE_MS_PER_MB = 0.25
SCAN_MB = 256.0
SCAN_PERIOD_MIN = 1.0
SCAN_PERIOD_MAX = 60.0
LOCAL_THRESHOLD = 0.7
DEFAULT_TOUCH_MB_PER_S = 1024.0
EPSILON = 1e-6
IMBALANCE_PCT = 117      # sched_domain imbalance_pct between nodes

KERNEL = 'kernel'        # NUMA balancing, in the guest's fault path
REMOTE = 'remote'        # move_pages / migrate_pages / cpuset by a task


class PhysicsError(AssertionError):
    """A placement broke the host's physics: a bug in a policy or here."""


@dataclasses.dataclass
class Guest:
    """A running guest: where its vCPUs run and where its pages lie."""

    name: str
    vcpus: int
    memory_mb: int
    profile: model.Profile
    cpu: dict                      # node -> fraction of its vCPUs
    ctrl_pages: dict = dataclasses.field(default_factory=dict)
    first_touch: tuple = ()        # nodes first touch prefers, in order
    first_ctrl: dict = dataclasses.field(default_factory=dict)
    extra_specs: dict = dataclasses.field(default_factory=dict)
    pinned: bool = False           # Nova pinned it: policies keep off
    allowed: tuple = ()            # cpuset.mems; () = every node
    interleave: bool = False       # MPOL_INTERLEAVE over ``allowed``
    floating: bool = False         # vCPUs placed by the kernel
    touch_mb_per_s: float = DEFAULT_TOUCH_MB_PER_S
    oom: bool = False
    # Kernel NUMA balancing state.
    scan_period: float = SCAN_PERIOD_MIN
    next_scan: float = 0.0
    # vCPU time lost to migration in the current second.
    lost_ms: float = 0.0

    @property
    def allocated_mb(self) -> float:
        return sum(self.ctrl_pages.values())

    def home(self) -> int | None:
        """The node most of its vCPUs run on, if it is a majority."""
        if not self.cpu:
            return None
        node, share = max(self.cpu.items(), key=lambda kv: (kv[1], -kv[0]))
        return node if share > 0.5 else None


@dataclasses.dataclass(frozen=True)
class Move:
    """What one of the agent's moves does to a guest
    (:meth:`Host.steady_effects`): its vCPUs pinned to ``cpu`` (node ->
    fraction; None: where they run) or left to the kernel
    (``floating``), its pages to ``memory`` (node -> fraction; None:
    where they are).
    """

    name: str
    cpu: dict | None = None
    memory: dict | None = None
    floating: bool = False


class Host:
    """A host spec with guests, their pages and the migration queue."""

    def __init__(self, spec: model.HostSpec, balancing: bool = True,
                 migrate_mb_per_s: float = MIGRATE_MB_PER_S):
        self.spec = spec
        self.solver = model.Solver(spec)
        self.ctrl_node = spec.controllers
        self.ctrl_cap = [float(mb) for mb in spec.controller_mb()]
        self.node_ctrls = [[c for c, n in enumerate(self.ctrl_node)
                            if n == node] for node in range(spec.size)]
        self.guests: dict = {}
        self.balancing = balancing
        self.migrate_mb_per_s = migrate_mb_per_s
        self.queue: list = []          # [guest, src, dst, MiB, kind]
        self.moved_mb = 0.0            # by migrations of every kind
        self.moved_by = {KERNEL: 0.0, REMOTE: 0.0}
        self.oom_kills = 0
        self._solo: dict = {}
        self._warm = None
        self._bg = None

    # -- memory accounting --------------------------------------------------

    def ctrl_used(self) -> list:
        used = [0.0] * len(self.ctrl_node)
        for g in self.guests.values():
            for c, mb in g.ctrl_pages.items():
                used[c] += mb
        return used

    def ctrl_free(self) -> list:
        return [cap - used for cap, used in zip(self.ctrl_cap,
                                                self.ctrl_used())]

    def free_mb(self) -> list:
        """Free memory per node, MiB."""
        free = [0.0] * self.spec.size
        for c, mb in enumerate(self.ctrl_free()):
            free[self.ctrl_node[c]] += mb
        return [max(0, int(f)) for f in free]

    def pages(self, guest: Guest) -> dict:
        """Node -> MiB of the guest's pages."""
        out = {}
        for c, mb in guest.ctrl_pages.items():
            if mb > EPSILON:
                node = self.ctrl_node[c]
                out[node] = out.get(node, 0.0) + mb
        return out

    def allowed(self, guest: Guest) -> list:
        return list(guest.allowed) or list(range(self.spec.size))

    def _put(self, guest: Guest, node: int, mb: float, free: list,
             prefer: int | None = None) -> float:
        """Place up to ``mb`` on ``node``'s controllers; returns MiB put.

        Pages go to ``prefer`` first (a controller first touch named),
        then spread over the controllers in proportion to their room.
        """
        ctrls = self.node_ctrls[node]
        put = 0.0
        if prefer is not None and prefer in ctrls:
            take = min(mb, max(free[prefer], 0.0))
            if take > 0:
                guest.ctrl_pages[prefer] = guest.ctrl_pages.get(
                    prefer, 0.0) + take
                free[prefer] -= take
                put += take
        room = sum(max(free[c], 0.0) for c in ctrls)
        want = min(mb - put, room)
        if want > EPSILON:
            for c in ctrls:
                take = want * max(free[c], 0.0) / room
                if take > 0:
                    guest.ctrl_pages[c] = guest.ctrl_pages.get(c, 0.0) + take
                    free[c] -= take
                    put += take
        return put

    def _take(self, guest: Guest, node: int, mb: float) -> float:
        """Remove up to ``mb`` of the guest's pages from ``node``."""
        ctrls = [c for c in self.node_ctrls[node]
                 if guest.ctrl_pages.get(c, 0.0) > EPSILON]
        have = sum(guest.ctrl_pages[c] for c in ctrls)
        take = min(mb, have)
        if take <= EPSILON:
            return 0.0
        for c in ctrls:
            guest.ctrl_pages[c] -= take * guest.ctrl_pages[c] / have
            if guest.ctrl_pages[c] <= EPSILON:
                del guest.ctrl_pages[c]
        return take

    def touch_order(self, guest: Guest) -> list:
        """Nodes a new page of the guest may go to, first choice first."""
        allowed = self.allowed(guest)
        if guest.interleave:
            return allowed
        local = guest.home()
        if local is None:
            local = max(guest.cpu, key=lambda n: (guest.cpu[n], -n)) \
                if guest.cpu else 0
        preferred = [n for n in guest.first_touch if n in allowed] or \
            ([local] if local in allowed else [])
        rest = sorted((n for n in allowed if n not in preferred),
                      key=lambda n: (self.spec.distances[local][n], n))
        return preferred + rest

    def allocate(self, guest: Guest, mb: float) -> float:
        """First touch of ``mb`` more MiB; returns MiB it could not get."""
        free = self.ctrl_free()
        order = self.touch_order(guest)
        left = mb
        if guest.interleave:
            while left > EPSILON:
                nodes = [n for n in order
                         if sum(free[c] for c in self.node_ctrls[n]) >
                         EPSILON]
                if not nodes:
                    break
                share = left / len(nodes)
                for n in nodes:
                    left -= self._put(guest, n, share, free)
            return max(left, 0.0)
        wanted = [n for n in guest.first_touch if n in order]
        if len(wanted) > 1:
            # Several first-touch nodes (vCPUs on several nodes): an even
            # share on each while they have room.
            share = left / len(wanted)
            for n in wanted:
                left -= self._put(guest, n, share, free,
                                  guest.first_ctrl.get(n))
        for n in order:
            if left <= EPSILON:
                break
            left -= self._put(guest, n, left, free, guest.first_ctrl.get(n))
        return max(left, 0.0)

    # -- guests ---------------------------------------------------------------

    def add(self, guest: Guest, preallocate: bool = False) -> None:
        self.guests[guest.name] = guest
        if preallocate:
            self._touch(guest, guest.memory_mb)

    def remove(self, name: str) -> None:
        self.guests.pop(name, None)
        self.queue = [m for m in self.queue if m[0].name != name]

    def _touch(self, guest: Guest, mb: float) -> None:
        mb = min(mb, guest.memory_mb - guest.allocated_mb)
        if mb <= EPSILON or guest.oom:
            return
        missing = self.allocate(guest, mb)
        if missing > 1.0:
            # Confined to nodes that cannot hold it: the OOM killer.
            guest.oom = True
            guest.ctrl_pages.clear()
            self.oom_kills += 1

    def restrict(self, guest: Guest, nodes) -> None:
        """cpuset.mems: the kernel migrates what lies outside into it."""
        nodes = tuple(sorted(set(nodes)))
        guest.allowed = nodes
        pages = self.pages(guest)
        outside = {n: mb for n, mb in pages.items() if n not in nodes}
        if not outside:
            return
        free = self.free_mb()
        room = {n: free[n] for n in nodes}
        total_room = sum(room.values())
        for src, mb in outside.items():
            for dst in nodes:
                share = mb * room[dst] / total_room if total_room else \
                    mb / len(nodes)
                if share > EPSILON:
                    self.enqueue(guest, src, dst, share, REMOTE)

    def enqueue(self, guest: Guest, src: int, dst: int, mb: float,
                kind: str) -> None:
        if src != dst and mb > EPSILON:
            self.queue.append([guest, src, dst, float(mb), kind])

    def pending_mb(self, guest: Guest | None = None) -> float:
        return sum(m[3] for m in self.queue
                   if guest is None or m[0] is guest)

    # -- one simulated second -------------------------------------------------

    def step(self, now: float, seconds: float = 1.0) -> None:
        """First touch, NUMA balancing and migrations for ``seconds``."""
        for g in self.guests.values():
            g.lost_ms = 0.0
            if g.allocated_mb < g.memory_mb - EPSILON:
                self._touch(g, g.touch_mb_per_s * seconds)
        self._load_balance()
        if self.balancing:
            for g in self.guests.values():
                self._balance(g, now)
        self._bg = self._migrate(seconds)
        self.check()

    def cpu_load(self) -> list:
        load = [0.0] * self.spec.size
        for g in self.guests.values():
            if not g.oom:
                for n, f in g.cpu.items():
                    load[n] += g.vcpus * f
        return load

    def _move_vcpus(self, guest: Guest, src: int, dst: int,
                    count: float) -> None:
        cpu = {n: f * guest.vcpus for n, f in guest.cpu.items()}
        count = min(count, cpu.get(src, 0.0))
        cpu[src] -= count
        cpu[dst] = cpu.get(dst, 0.0) + count
        guest.cpu = {n: c / guest.vcpus for n, c in cpu.items()
                     if c > EPSILON}

    def _load_balance(self) -> None:
        """The CFS load balancer, for floating vCPUs, one vCPU at a time:
        from a node with more runnable vCPUs than cores to the nearest node
        with an idle core; with no idle core left, from the node with the
        most runnable vCPUs per CPU to the one with the fewest, while the
        first has more than IMBALANCE_PCT percent of the second's
        (find_busiest_group and calculate_imbalance between NUMA nodes;
        imbalance_pct 117) and the move does not overshoot. A node whose
        vCPUs are all pinned gives none (the kernel's LBF_ALL_PINNED: it
        looks for another).
        """
        floating = [g for g in self.guests.values()
                    if g.floating and not g.oom]
        if not floating:
            return
        size = self.spec.size
        cores = [node.cores for node in self.spec.nodes]
        cpus = [node.cpus for node in self.spec.nodes]
        load = self.cpu_load()

        def movable(n):
            return [g for g in floating
                    if g.cpu.get(n, 0.0) * g.vcpus >= 1 - EPSILON]

        for _ in range(sum(g.vcpus for g in floating)):
            busy = [n for n in range(size)
                    if load[n] > cores[n] + EPSILON and movable(n)]
            idle = [n for n in range(size)
                    if load[n] <= cores[n] - 1 + EPSILON]
            if not busy or not idle:
                break
            src = max(busy, key=lambda n: (load[n] - cores[n], -n))
            dst = min(idle, key=lambda n: (self.spec.distances[src][n],
                                           load[n] - cores[n], n))
            self._pull(movable(src), src, dst, load)
        for _ in range(sum(g.vcpus for g in floating)):
            per = [load[n] / cpus[n] for n in range(size)]
            busy = [n for n in range(size)
                    if load[n] > cores[n] + EPSILON and movable(n)]
            if not busy:
                break
            src = max(busy, key=lambda n: (per[n], -n))
            dst = min(range(size), key=lambda n: (
                per[n], self.spec.distances[src][n], n))
            if per[src] * 100 <= IMBALANCE_PCT * per[dst] or \
                    (load[src] - 1) / cpus[src] < \
                    (load[dst] + 1) / cpus[dst]:
                break
            self._pull(movable(src), src, dst, load)

    def _pull(self, movable, src, dst, load) -> None:
        """One vCPU from ``src`` to ``dst``, of the guest (among
        ``movable``) with the least of its memory on ``src``.
        """
        guest = min(movable, key=lambda g: (
            self.pages(g).get(src, 0.0) / max(g.allocated_mb, 1.0),
            g.name))
        self._move_vcpus(guest, src, dst, 1.0)
        load[src] -= 1.0
        load[dst] += 1.0

    def _place_task(self, guest: Guest) -> None:
        """NUMA balancing's task placement: a floating guest's vCPUs go
        to the node with most of its memory when it has the cores.
        """
        pages = self.pages(guest)
        if not guest.floating or not pages:
            return
        preferred = max(pages, key=lambda n: (pages[n], -n))
        if guest.cpu.get(preferred, 0.0) >= 1.0 - EPSILON:
            return
        load = self.cpu_load()
        elsewhere = guest.vcpus * (1.0 - guest.cpu.get(preferred, 0.0))
        if load[preferred] + elsewhere <= \
                self.spec.nodes[preferred].cores + EPSILON:
            guest.cpu = {preferred: 1.0}

    def _balance(self, guest: Guest, now: float) -> None:
        if guest.interleave or guest.oom or now < guest.next_scan:
            return
        guest.next_scan = now + guest.scan_period
        self._place_task(guest)
        home = guest.home()
        total = guest.allocated_mb
        if home is None or total <= EPSILON:
            return
        if home not in self.allowed(guest):
            return
        pages = self.pages(guest)
        local = pages.get(home, 0.0) / total
        if local >= LOCAL_THRESHOLD:
            guest.scan_period = min(guest.scan_period * 2, SCAN_PERIOD_MAX)
        else:
            guest.scan_period = max(guest.scan_period / 2, SCAN_PERIOD_MIN)
        # Pages a previous scan queued are not found misplaced again.
        queued = {}
        for m in self.queue:
            if m[0] is guest:
                queued[m[1]] = queued.get(m[1], 0.0) + m[3]
        scanned = min(SCAN_MB, total) * guest.profile.touched
        for src, mb in pages.items():
            if src == home:
                continue
            misplaced = max(mb - queued.get(src, 0.0), 0.0)
            self.enqueue(guest, src, home, scanned * misplaced / total,
                         KERNEL)

    def _migrate(self, seconds: float):
        """Drain the queue; returns the migration traffic (bytes/s)."""
        budget = self.migrate_mb_per_s * seconds
        n = self.spec.size
        bg_ctrl = numpy.zeros(len(self.ctrl_node))
        bg_link = numpy.zeros((n, n))
        free = self.ctrl_free()
        left = []
        for entry in self.queue:
            guest, src, dst, mb, kind = entry
            if budget <= EPSILON or guest.name not in self.guests:
                if guest.name in self.guests:
                    left.append(entry)
                continue
            if dst not in self.allowed(guest) or guest.oom:
                continue
            room = sum(max(free[c], 0.0) for c in self.node_ctrls[dst])
            amount = min(mb, budget, self.pages(guest).get(src, 0.0), room)
            if amount <= EPSILON:
                continue
            src_ctrls = {c: guest.ctrl_pages.get(c, 0.0)
                         for c in self.node_ctrls[src]}
            taken = self._take(guest, src, amount)
            put = self._put(guest, dst, taken, free)
            for c, before in src_ctrls.items():
                freed = before - guest.ctrl_pages.get(c, 0.0)
                free[c] += freed
                bg_ctrl[c] += freed * 2 ** 20 / seconds
            for c in self.node_ctrls[dst]:
                bg_ctrl[c] += put * 2 ** 20 / seconds / len(
                    self.node_ctrls[dst])
            bg_link[dst][src] += put * 2 ** 20 / seconds
            budget -= put
            self.moved_mb += put
            self.moved_by[kind] += put
            cost = FAULT_PATH_MS_PER_MB if kind == KERNEL else \
                REMOTE_MS_PER_MB
            guest.lost_ms += put * cost
            if mb - put > EPSILON:
                left.append([guest, src, dst, mb - put, kind])
        self.queue = left
        return bg_ctrl, bg_link

    def check(self) -> None:
        """Raise :class:`PhysicsError` if any controller is overfull or a
        guest holds more than its memory.
        """
        used = self.ctrl_used()
        for c, (u, cap) in enumerate(zip(used, self.ctrl_cap)):
            if u > cap + 1.0:
                raise PhysicsError('controller %d of node %d holds %.0f MiB '
                                   'of %.0f' % (c, self.ctrl_node[c], u, cap))
        for g in self.guests.values():
            if g.allocated_mb > g.memory_mb + 1.0:
                raise PhysicsError('%s holds %.0f MiB of its %d'
                                   % (g.name, g.allocated_mb, g.memory_mb))

    # -- performance --------------------------------------------------------

    def loads(self) -> list:
        out = []
        for g in self.guests.values():
            total = g.allocated_mb
            if g.oom or total <= EPSILON:
                continue
            out.append(model.Load(
                name=g.name, vcpus=g.vcpus, profile=g.profile, cpu=g.cpu,
                memory={c: mb / total for c, mb in g.ctrl_pages.items()
                        if mb > EPSILON},
                lost=g.lost_ms / 1000.0 / max(g.vcpus, 1)))
        return out

    def solve(self, loads=None) -> model.Result:
        """The host's steady state now (migration traffic included)."""
        result = self.solver.solve(loads if loads is not None
                                   else self.loads(), self._bg, self._warm)
        if loads is None:
            self._warm = result.state
        return result

    def steady_effects(self, move: Move, earlier=()) -> dict:
        """Name -> speed after / before of every guest, were ``move``
        made on top of the ``earlier`` moves (of the same pass, made
        first): the steady state the move leads to against the one it
        leaves, each with its moves' vCPUs as pinned (or left to the
        kernel), their pages all landed, the floating vCPUs where the
        kernel's load balancer puts them, no page in flight and no time
        lost to migration. What the agent's cost model predicts, without
        the transient the host goes through. A guest that does not run
        on either side is left out.
        """
        before = self._steady_ips(earlier)
        after = self._steady_ips(tuple(earlier) + (move,))
        return {n: after[n] / ips for n, ips in before.items()
                if ips > 0 and after.get(n, 0.0) > 0}

    def _steady_ips(self, moves) -> dict:
        """Instructions per second of every guest once ``moves`` are
        made, in steady state (:meth:`steady_effects`); the host itself
        is left as it is.
        """
        shadow = copy.copy(self)
        shadow.guests = {
            n: dataclasses.replace(g, cpu=dict(g.cpu),
                                   ctrl_pages=dict(g.ctrl_pages),
                                   lost_ms=0.0)
            for n, g in self.guests.items()}
        for move in moves:
            guest = shadow.guests.get(move.name)
            if guest is None:
                continue
            if move.floating:
                guest.floating = True
            elif move.cpu is not None:
                guest.cpu = dict(move.cpu)
                guest.floating = False
            if move.memory is not None:
                shadow._land(guest, move.memory)
        shadow._load_balance()
        result = self.solver.solve(shadow.loads())
        return {n: float(ips) for n, ips in zip(result.names, result.ips)}

    def _land(self, guest: Guest, memory: dict) -> None:
        """The guest's pages moved between nodes towards ``memory``'s
        shares (node -> fraction), as migrations move them: those a node
        keeps stay on their controllers, those that come are spread over
        the controllers by their room, and where a node has too little
        room the pages it cannot take stay where they are (each node
        giving its share of them).
        """
        total = guest.allocated_mb
        now = self.pages(guest)
        free = self.ctrl_free()
        fits = {}
        for node, frac in memory.items():
            short = total * frac - now.get(node, 0.0)
            room = sum(max(free[c], 0.0) for c in self.node_ctrls[node])
            if short > EPSILON and room > EPSILON:
                fits[node] = min(short, room)
        surplus = {node: mb - total * memory.get(node, 0.0)
                   for node, mb in now.items()}
        surplus = {n: mb for n, mb in surplus.items() if mb > EPSILON}
        leaving = sum(surplus.values())
        coming = sum(fits.values())
        if leaving <= EPSILON or coming <= EPSILON:
            return
        moved = min(leaving, coming)
        for node, mb in surplus.items():
            self._take(guest, node, mb * moved / leaving)
        for node, mb in fits.items():
            self._put(guest, node, mb * moved / coming, free)

    def solo_ips(self, guest: Guest) -> float:
        key = (guest.profile, guest.vcpus)
        if key not in self._solo:
            self._solo[key] = self.solver.solo_ips(guest.profile,
                                                   guest.vcpus)
        return self._solo[key]

    def throughput(self, result: model.Result) -> dict:
        """Name -> throughput normalised to running alone (0 once OOM
        killed).
        """
        out = {name: float(ips) / self.solo_ips(self.guests[name])
               for name, ips in zip(result.names, result.ips)
               if name in self.guests}
        for g in self.guests.values():
            if g.oom:
                out[g.name] = 0.0
        return out
