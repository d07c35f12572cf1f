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
"""Placement of a starting guest's memory (Liu & Li, sections 4.2, 5.2).

On every "started" event (first boot, hard reboot, resize, migration: Nova
rewrites the domain XML each time) the agent plans the guest's shares with
the shared planner and the flavor's ``numa_overhead:*`` extra specs, then
enforces them by ``[numa_overhead_agent] enforcement``:

* ``off``: nothing; ``advisory``: log and notify the plan only;
* ``nodeset``: restrict the guest to the planned nodes (live numatune);
* ``pages``: restrict, then move pages to reach the planned shares.

Safety rules, checked before anything changes: a pinned guest is never
touched; a page never goes to a node outside the guest's allowed set; a
guest is never restricted to nodes whose room cannot hold all of its
configured memory plus ``reserve_mb``. Room is free memory (what the guest
already has there counted as free, once) minus the memory the other
guests were given and have yet to touch there
(:mod:`nova_numa_overhead.overhead.room`): a guest confined to nodes that
fill up before it has touched all of its memory is killed out of memory.
When no set of its allowed nodes has that room, the guest is left where it
is, and the decision says so.

Unless ``[numa_overhead_agent] remote_placement`` is on, a guest of the
proportional policy (the default) is planned over the nodes its vCPUs run
on only (a starting guest is not measured: where its memory goes further
is the optimizer's decision, in predicted time and checked, and the
level-based rebalancer's); when they cannot hold it, it is left where the
kernel puts it. The ``local`` and ``spread`` policies are planned over
every node Nova allows, as the schedulers plan them; so is a guest whose
vCPUs' nodes are not known yet. With ``colocate_vcpus`` the vCPUs may move
to a better node; with the local rule the memory then goes to that node
alone (one with room for it and ``reserve_mb``).

Under that local rule, a guest whose vCPUs may run beyond the plan's nodes
(their affinity: floating over Nova's CPUs) and whose memory is already
there (a guest just started) is not confined either: confining would move
nothing, and the kernel would then keep its pages away from vCPUs that its
scheduler moves to other nodes (measured in the simulator: guests at 0.73x
of Nova's default on crowded nodes). The optimizer moves its vCPUs and
memory together when that pays.
"""

import dataclasses
import os

from oslo_log import log as logging

from nova_numa_overhead.compute import cgroups
from nova_numa_overhead.compute import hypervisor as hv_mod
from nova_numa_overhead.overhead import planner
from nova_numa_overhead.overhead import specs as specs_mod

LOG = logging.getLogger(__name__)

# Levels by which moving a guest's vCPUs must beat keeping them.
COLOCATE_MARGIN = 1
# Memory of a guest just started outside its plan's nodes that still
# counts as where the plan puts it (QEMU's own and what the guest touched
# before the agent saw it: 12 MiB, over two nodes, for a paused guest
# without preallocation in the 4-node test VM): this share of the memory
# touched or this many MiB, whichever is larger.
OUTSIDE = 0.05
OUTSIDE_MB = 128
PAGE_SIZE = os.sysconf('SC_PAGE_SIZE')
OFF = 'off'
ADVISORY = 'advisory'
NODESET = 'nodeset'
PAGES = 'pages'


@dataclasses.dataclass(slots=True)
class Decision:
    """What the placer decided for one guest, and what it did."""

    guest: str
    action: str                 # skipped | planned | restricted | moved
    reason: str
    plan: dict = dataclasses.field(default_factory=dict)    # node -> MiB
    before: dict = dataclasses.field(default_factory=dict)  # node -> MiB
    moves: list = dataclasses.field(default_factory=list)   # (from, to, MiB)
    moved_mb: float = 0.0
    failed: dict = dataclasses.field(default_factory=dict)  # errno -> pages
    overhead: float | None = None
    cpus: tuple = ()            # host CPUs the vCPUs were narrowed to

    def payload(self) -> dict:
        return dataclasses.asdict(self)


def guest_policy(domain: hv_mod.DomainInfo, managed: str,
                 default_policy: str, default_max_nodes: int):
    """The guest's policy, or (None, why) when it must be left alone."""
    if domain.pinned:
        return None, 'pinned by Nova (%s)' % (domain.pinned_reason or
                                              'numatune/dedicated/hugepages')
    if domain.metadata_error:
        return None, 'unreadable Nova metadata: %s' % domain.metadata_error
    if not domain.nova:
        return None, 'not a Nova guest'
    specs = domain.extra_specs or {}
    if managed == 'opt_in' and specs_mod.SPEC_POLICY not in specs:
        return None, 'flavor does not opt in (managed_guests=opt_in)'
    try:
        policy = specs_mod.policy_from_extra_specs(
            specs, default_policy, default_max_nodes)
    except specs_mod.InvalidRequest as exc:
        return None, 'invalid extra spec: %s' % exc
    if policy.policy == planner.NONE:
        return None, 'numa_overhead:policy=none'
    return policy, ''


def _left_to_kernel(reach, shares, before, fresh) -> str | None:
    """Whether a plan on the nodes the guest's vCPUs run on is better left
    undone: its vCPUs may run beyond those nodes (``reach``), and it is not
    a guest just started (``fresh``: its memory may lie where QEMU first
    touched it, away from its vCPUs) or its memory is already there (at
    most OUTSIDE of what it touched, or OUTSIDE_MB, elsewhere). Confining
    the memory would move next to nothing now, or pages the kernel placed,
    and would keep it away from vCPUs that the kernel's scheduler moves to
    other nodes (first touch, and NUMA balancing where it is on, bring
    pages after them).

    Returns why (the end of the decision's reason), or None.
    """
    if not reach or set(reach) <= set(shares):
        return None
    outside = sum(v for n, v in before.items() if n not in shares)
    if not fresh:
        why = 'it was running already (found by the agent, or resumed)'
    elif outside > max(OUTSIDE * sum(before.values()), OUTSIDE_MB):
        return None
    elif outside >= 1:
        why = ('its memory is there already (%d MiB elsewhere, within '
               'the slack)' % outside)
    else:
        why = 'its memory is there already'
    return (': its vCPUs may run on nodes %s, beyond the plan\'s nodes %s, '
            'and %s: not confined, so that the kernel keeps its pages near '
            'its vCPUs (the optimizer moves both together where that '
            'pays)' % (cgroups.format_mems(reach),
                       cgroups.format_mems(shares), why))


def local_node(cpu: dict) -> int | None:
    """The node most of the guest's vCPUs run on, if it is a majority."""
    if not cpu:
        return None
    node, share = max(cpu.items(), key=lambda kv: (kv[1], -kv[0]))
    return node if share > 0.5 else None


def moves_towards(before: dict, target: dict) -> list:
    """(from, to, MiB) moves turning ``before`` into ``target``.

    Largest surplus to largest deficit first; amounts in whole MiB.
    """
    nodes = set(before) | set(target)
    surplus = {n: before.get(n, 0) - target.get(n, 0) for n in nodes}
    givers = sorted((n for n in nodes if surplus[n] >= 1),
                    key=lambda n: (-surplus[n], n))
    takers = sorted((n for n in nodes if surplus[n] <= -1),
                    key=lambda n: (surplus[n], n))
    moves = []
    for giver in givers:
        for taker in takers:
            amount = int(min(surplus[giver], -surplus[taker]))
            if amount < 1:
                continue
            moves.append((giver, taker, amount))
            surplus[giver] -= amount
            surplus[taker] += amount
    return moves


class Placer:
    """Plans and enforces a starting guest's memory placement."""

    def __init__(self, hypervisor, enforcement: str, reserve_mb: int,
                 managed: str = 'floating',
                 default_policy: str = planner.PROPORTIONAL,
                 default_max_nodes: int = planner.DEFAULT_MAX_NODES,
                 page_budget=None, colocate_cpus=None, judge=None,
                 remote=False):
        self.hv = hypervisor
        self.enforcement = enforcement
        self.reserve_mb = reserve_mb
        self.managed = managed
        self.default_policy = default_policy
        self.default_max_nodes = default_max_nodes
        # Callable(mb) -> max pages allowed now (the shared rate limit).
        self.page_budget = page_budget or (lambda mb: None)
        # Callable giving node -> host CPUs: when set, the guest's vCPUs
        # follow the plan's local node ([numa_overhead_agent]
        # colocate_vcpus).
        self.colocate_cpus = colocate_cpus
        # Callable(domain, cpu, before, shares) -> None, or why the plan
        # is predicted to make the host slower (the cost model): then the
        # guest is left where it is.
        self.judge = judge
        # False: a starting proportional guest's memory only on its vCPUs'
        # nodes ([numa_overhead_agent] remote_placement).
        self.remote = remote

    def _local_only(self, policy) -> bool:
        """Whether the guest's memory is planned on its vCPUs' nodes only:
        ``remote_placement`` off and the proportional policy (the paper's,
        the default); ``local`` and ``spread`` are what they say.
        """
        return not self.remote and policy.policy == planner.PROPORTIONAL

    def _moved(self, view, mb, policy, local_only,
               domain) -> 'planner.Plan | None':
        """The best plan from any local node, its vCPUs moved there; local
        only: the best single node with room for it and ``reserve_mb``.
        Only nodes with CPUs Nova allows the guest can be its local node.
        """
        reach = self.colocate_cpus(domain)
        nodes = tuple(n for n in view.local_nodes if reach.get(n))
        if not nodes:
            return None
        if nodes != tuple(view.local_nodes):
            view = dataclasses.replace(view, local_nodes=nodes)
        if not local_only:
            return planner.plan(view, mb, policy.policy, policy.max_nodes)
        best = None
        for node in view.local_nodes:
            if view.free_mb[node] < mb + self.reserve_mb:
                continue
            plan = planner.plan(restrict(view, {node}), mb, policy.policy,
                                policy.max_nodes, local=node)
            if plan is not None and (best is None or
                                     plan.overhead < best.overhead):
                best = plan
        return best

    def better_home(self, domain, view, cpu) -> 'planner.Plan | None':
        """A plan on another local node a margin better, or None."""
        policy, _ = guest_policy(domain, self.managed, self.default_policy,
                                 self.default_max_nodes)
        here = local_node(cpu)
        if policy is None or here is None or not self.colocate_cpus:
            return None
        mb = max(domain.memory_mb, 1)
        allowed = set(domain.allowed_nodes or range(view.size))
        view = restrict(view, allowed)
        local_only = self._local_only(policy)
        stay_view = restrict(view, allowed & _vcpu_nodes(cpu)) \
            if local_only else view
        stay = planner.plan(stay_view, mb, policy.policy, policy.max_nodes,
                            local=here)
        best = self._moved(view, mb, policy, local_only, domain)
        if best is None or best.local == here:
            return None
        if stay is not None and best.overhead > \
                stay.overhead - COLOCATE_MARGIN:
            return None
        return best

    def place(self, domain: hv_mod.DomainInfo, view: planner.HostView,
              cpu: dict, before: dict, reach=None,
              fresh: bool = True) -> Decision:
        """Plan and enforce one guest.

        :param view: the host as the agent measured it, the guest's own
            memory counted as free and what the other guests have yet to
            touch counted as taken (``Agent.host_view(without=...)``): the
            room check reads it as it is.
        :param cpu: node -> fraction of the guest's vCPUs.
        :param before: node -> MiB of the guest's memory now.
        :param reach: a callable giving the nodes whose CPUs its vCPUs
            may run on (their affinity), None when unknown; called only
            where the answer matters.
        :param fresh: whether the guest has just started (a new QEMU),
            not found running by an agent just started nor resumed.
        """
        # (nodes, CPUs) set on the guest so far, None: nothing (read by
        # the agent when the placement fails half-way).
        self.applied = None
        policy, why = guest_policy(domain, self.managed,
                                   self.default_policy,
                                   self.default_max_nodes)
        if policy is None:
            return Decision(domain.name, 'skipped', why, before=before)
        allowed = set(domain.allowed_nodes or range(view.size))
        full = restrict(view, allowed)
        # Where its vCPUs run (when known) and Nova allows, unless the
        # paper's placement (remote_placement) or another policy.
        local_only = self._local_only(policy) and bool(_vcpu_nodes(cpu))
        targets = allowed & _vcpu_nodes(cpu) if local_only else allowed
        view = restrict(full, targets) if targets != allowed else full
        mb = max(domain.memory_mb, 1)
        here = local_node(cpu)
        plan = planner.plan(view, mb, policy.policy, policy.max_nodes,
                            local=here) if targets else None
        # Whether the plan takes the vCPUs to its local node: with the
        # local rule, only a colocation move does (a plan over the nodes
        # they run on leaves them there).
        follow = bool(self.colocate_cpus) and not local_only
        if self.colocate_cpus:
            # Moving the vCPUs too pays only when another local node is a
            # level better than bringing the memory to where they run.
            best = self._moved(full, mb, policy, local_only, domain)
            if best is not None and (plan is None or best.overhead <=
                                     plan.overhead - COLOCATE_MARGIN):
                plan = best
                view = restrict(full, {best.local}) if local_only else full
                follow = True
        if plan is None:
            if not targets:
                why = ('its vCPUs run on no node Nova allows its memory on '
                       '(remote_placement off): left where it is')
            else:
                why = ('no set of its allowed nodes%s has room for its %d '
                       'MiB besides what other guests have yet to touch: '
                       'left where it is' % (
                           ' its vCPUs run on' if targets != allowed
                           else '', domain.memory_mb))
            return Decision(domain.name, 'skipped', why, before=before)
        if self.enforcement not in (OFF, ADVISORY):
            plan = self._with_reserve(view, plan, policy, mb)
        decision = Decision(domain.name, 'planned',
                            'policy %s, max_nodes %d' % (policy.policy,
                                                         policy.max_nodes),
                            plan=dict(plan.shares), before=dict(before),
                            overhead=plan.overhead)
        moves_vcpus = follow and here != plan.local
        floats = reach() if reach is not None and local_only and \
            not moves_vcpus else None
        left = _left_to_kernel(floats, plan.shares, before, fresh)
        if left:
            decision.action = 'skipped'
            decision.reason += left
            return decision
        if self.enforcement in (OFF, ADVISORY):
            decision.moves = moves_towards(before, plan.shares)
            decision.reason += ' (enforcement=%s)' % self.enforcement
            return decision
        nodes = sorted(plan.shares)
        # The view counts the guest's own memory as free and the memory
        # other guests have yet to touch as taken: adding ``before`` again
        # would count it twice.
        room = sum(view.free_mb[n] for n in nodes)
        if room < domain.memory_mb + self.reserve_mb:
            decision.action = 'skipped'
            decision.reason = ('nodes %s cannot hold its %d MiB plus '
                               'reserve_mb %d besides what other guests '
                               'have yet to touch there (room %d MiB): left '
                               'where it is' % (nodes, domain.memory_mb,
                                                self.reserve_mb, room))
            return decision
        # The judge scores memory moves with the vCPUs where they run: a
        # plan that moves the vCPUs too (colocate_vcpus) is the placer's.
        verdict = self.judge(domain, cpu, before, plan.shares) \
            if self.judge is not None and not moves_vcpus else None
        if verdict:
            decision.action = 'skipped'
            decision.reason = '%s: left where it is' % verdict
            return decision
        self.hv.set_nodeset(domain, nodes)
        self.applied = (tuple(nodes), ())
        decision.action = 'restricted'
        if moves_vcpus:
            cpus = self.colocate_cpus(domain).get(plan.local)
            if cpus:
                self.hv.pin_vcpus(domain, cpus)
                self.applied = (tuple(nodes), tuple(cpus))
                decision.cpus = tuple(cpus)
                decision.reason += ', vCPUs to node %d' % plan.local
        if self.enforcement == PAGES:
            # Restricting the nodeset made the kernel move what lay outside
            # it (cgroup v2 migrates on a cpuset.mems change): plan the rest
            # from where the memory is now, so that no page moves twice.
            now = self.memory_now(domain, before)
            decision.moves = moves_towards(
                {n: mb for n, mb in now.items() if n in allowed},
                plan.shares)
            if decision.moves:
                mb = sum(m[2] for m in decision.moves)
                result = self.hv.move_pages(domain, decision.moves,
                                            self.page_budget(mb))
                decision.action = 'moved'
                decision.moved_mb = result.moved * page_mb()
                decision.failed = dict(result.failed)
        return decision

    def _with_reserve(self, view, plan, policy, mb) -> 'planner.Plan':
        """``plan``, or one on nodes with room for ``reserve_mb`` more.

        The nodes of the first plan may hold the guest but not the reserve
        on top; a plan for the guest plus the reserve picks nodes that
        hold both, and its shares are scaled back to the guest's size.
        """
        room = sum(view.free_mb[n] for n in plan.shares)
        if not self.reserve_mb or room >= mb + self.reserve_mb:
            return plan
        wider = planner.plan(view, mb + self.reserve_mb, policy.policy,
                             policy.max_nodes, local=plan.local)
        if wider is None:
            return plan
        total = sum(wider.shares.values())
        shares = {n: int(s * mb / total) for n, s in wider.shares.items()}
        first = min(shares, key=lambda n: (view.overhead[wider.local][n], n))
        shares[first] += mb - sum(shares.values())
        return dataclasses.replace(
            wider, shares={n: s for n, s in shares.items() if s > 0})

    def memory_now(self, domain, before: dict) -> dict:
        """The guest's memory per node now (MiB), read after a nodeset
        change (the placer's and the optimizer's); ``before`` if unreadable.
        DomainGone and HypervisorUnavailable are raised.
        """
        try:
            return self.hv.memory_per_node(domain)
        except (hv_mod.DomainGone, hv_mod.HypervisorUnavailable):
            raise
        except (hv_mod.HypervisorError, OSError, ValueError) as exc:
            # Measuring is the agent's business: the pages can still move
            # from where they were.
            LOG.debug('Memory of %s unreadable after its nodeset changed: %s',
                      domain.name, exc)
            return before


def page_mb() -> float:
    """MiB of a base page of this host (64 KiB ones on some arm64 and
    ppc64le kernels): what a page count from ``move_pages`` is in.
    """
    return PAGE_SIZE / (1024.0 * 1024.0)


def _vcpu_nodes(cpu: dict) -> set:
    return {n for n, f in cpu.items() if f > 0}


def restrict(view: planner.HostView, allowed) -> planner.HostView:
    """The view with no free memory outside ``allowed``."""
    if len(allowed) == view.size:
        return view
    return dataclasses.replace(
        view, free_mb=[f if n in allowed else 0
                       for n, f in enumerate(view.free_mb)],
        local_nodes=tuple(n for n in view.local_nodes if n in allowed) or
        view.local_nodes)
