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
"""Periodic rebalancing: the P2M swap FIFO of Liu & Li (section 4.3),
as a Linux host allows it.

The paper keeps, per guest and per memory node, a 256-entry FIFO of
recently unused page mappings; when a node a guest uses exceeds an overhead
threshold and the lowest-overhead node is at least two levels lower, it pops
entries and swaps those pages there. Here, per managed guest and per node,
a bounded FIFO (``fifo_entries`` chunks of 64 MiB) holds candidate chunks of
the guest's memory on that node, refilled every period from where the
guest's memory lies; a period pops chunks from hot nodes and moves them to
the coolest node with room (nodes without memory never count), or, when
none has room, exchanges them for as much of another managed guest's
memory there. Which pages make up a chunk is the backend's
choice: the libvirt backend takes pages not used since the last period
first (idle page tracking or soft-dirty bits, see
:mod:`nova_numa_overhead.compute.coldpages`), then address order. Moves
are bounded per period and go through the shared rate limit.

Only memory-intensive guests are moved for their own sake (see
:mod:`nova_numa_overhead.overhead.classifier`): ``leave`` guests are not
(they may give memory in an exchange), ``gather`` guests get their memory
pulled to their vCPUs' node, ``spread`` guests get the FIFO treatment
above.
"""

import collections
import dataclasses

from nova_numa_overhead.overhead import classifier

CHUNK_MB = 64
MIB = 1024 * 1024
LEVELS_LOWER = 2


@dataclasses.dataclass(frozen=True)
class Chunk:
    """A candidate range of a guest's memory on one node."""

    node: int
    mb: int
    address: int | None = None   # start address, where the backend knows


class SwapFifo:
    """Per-node bounded FIFOs of one guest's candidate chunks.

    Cold chunks (with addresses, where the backend can tell) are kept as
    such; the rest of a node's queue is chunks of the guest's address
    space in order, which are interchangeable, so only their amount is
    kept: a guest costs a few dozen bytes, not a chunk object per entry.
    """

    __slots__ = ('entries', 'cold', 'plain')

    def __init__(self, entries: int):
        self.entries = entries
        self.cold: dict = {}    # node -> deque of Chunk with an address
        self.plain: dict = {}   # node -> MiB queued in address order

    def refill(self, memory_mb: dict, cold=None) -> None:
        """Top up each node's queue from the guest's memory there.

        ``cold`` (node -> list of Chunk) comes first when the backend can
        tell which pages were not used recently.
        """
        for node in [n for n in self.plain if memory_mb.get(n, 0) <= 0]:
            del self.plain[node]
            self.cold.pop(node, None)
        for node, mb in memory_mb.items():
            if mb <= 0:
                continue
            queue = self.cold.get(node)
            fresh = (cold or {}).get(node, ())
            if fresh and queue is None:
                queue = self.cold[node] = collections.deque()
            queued = sum(c.mb for c in queue) if queue else 0
            for chunk in fresh:
                if len(queue) >= self.entries or queued + chunk.mb > mb:
                    break
                queue.append(chunk)
                queued += chunk.mb
            room = self.entries - (len(queue) if queue else 0)
            self.plain[node] = int(max(0, min(mb - queued,
                                              room * CHUNK_MB)))

    def entries_of(self, node: int) -> list:
        """Chunk sizes queued for ``node``, first out first."""
        sizes = [c.mb for c in self.cold.get(node, ())]
        plain = self.plain.get(node, 0)
        sizes.extend([CHUNK_MB] * (plain // CHUNK_MB))
        if plain % CHUNK_MB:
            sizes.append(plain % CHUNK_MB)
        return sizes

    def pop(self, node: int, want_mb: int) -> list:
        """Chunks of ``node``, first out first, ``want_mb`` MiB at most:
        the last one is split, its rest stays queued.
        """
        taken = []
        got = 0
        queue = self.cold.get(node)
        while queue and got < want_mb:
            chunk = queue.popleft()
            part = min(chunk.mb, want_mb - got)
            if part < chunk.mb:
                rest = None if chunk.address is None else (
                    chunk.address + part * MIB)
                queue.appendleft(Chunk(node, chunk.mb - part, rest))
                chunk = Chunk(node, part, chunk.address)
            taken.append(chunk)
            got += part
        plain = self.plain.get(node, 0)
        while plain > 0 and got < want_mb:
            size = min(CHUNK_MB, plain, want_mb - got)
            taken.append(Chunk(node, size))
            plain -= size
            got += size
        if node in self.plain:
            self.plain[node] = plain
        return taken

    def __len__(self) -> int:
        return sum(len(self.entries_of(n)) for n in
                   set(self.plain) | set(self.cold))


@dataclasses.dataclass
class GuestView:
    """What the rebalancer needs of one managed guest."""

    name: str
    memory_mb: dict          # node -> MiB
    local: int | None        # node of its vCPUs, if a majority
    action: str              # classifier action
    fifo: SwapFifo


@dataclasses.dataclass(frozen=True)
class Move:
    guest: str
    src: int
    dst: int
    mb: int
    reason: str


def plan_moves(guests, overhead, free_mb, threshold: int, budget_mb: int,
               reserve_mb: int = 0, total_mb=None) -> list:
    """The moves of one rebalancing period.

    :param guests: GuestView of every managed guest.
    :param overhead: overhead[L][i] matrix of the host (estimator).
    :param free_mb: free memory per node.
    :param threshold: ``rebalance_threshold``: a node above it is hot.
    :param budget_mb: most memory moved this period (both ways of an
        exchange count).
    :param reserve_mb: free memory kept on a target node.
    :param total_mb: memory per node, where known: a node without any
        (memoryless, or a gap in the node ids) is never a target.
    """
    free = list(free_mb)
    moves = []
    n = len(free)
    for guest in sorted(guests, key=lambda g: g.name):
        if budget_mb <= 0:
            break
        if guest.action == classifier.LEAVE:
            continue
        local = guest.local
        row = overhead[local] if local is not None else [
            min(overhead[L][i] for L in range(n)) for i in range(n)]
        if guest.action == classifier.GATHER and local is not None:
            for src, mb in sorted(guest.memory_mb.items()):
                if src == local or budget_mb <= 0:
                    continue
                room = free[local] - reserve_mb
                take = int(min(mb, room, budget_mb))
                # No crumbs into a node's last MiB: room for a chunk, or
                # for all it has left there.
                chunks = guest.fifo.pop(src, take) \
                    if take > 0 and room >= min(mb, CHUNK_MB) else []
                amount = sum(c.mb for c in chunks)
                if amount:
                    moves.append(Move(guest.name, src, local, amount,
                                      'gather near vCPUs'))
                    free[local] -= amount
                    free[src] += amount
                    budget_mb -= amount
            continue
        for src in sorted(guest.memory_mb, key=lambda i: -row[i]):
            if budget_mb <= 0 or row[src] <= threshold:
                break
            dst = _target(row, src, free, reserve_mb, total_mb)
            if dst is None:
                break
            room = free[dst] - reserve_mb
            # Into the room there is, else exchanged: both ways count.
            want = int(min(guest.memory_mb[src], budget_mb,
                           room if room >= CHUNK_MB else budget_mb // 2))
            chunks = guest.fifo.pop(src, want)
            for chunk in chunks:
                if free[dst] - reserve_mb >= chunk.mb:
                    moves.append(Move(guest.name, src, dst, chunk.mb,
                                      'node %d at level %s > %d, node %d at '
                                      '%s' % (src, row[src], threshold, dst,
                                              row[dst])))
                    free[dst] -= chunk.mb
                    free[src] += chunk.mb
                    budget_mb -= chunk.mb
                    continue
                partner = _exchange_partner(guests, guest, dst, chunk.mb)
                if partner is None:
                    break
                # As much each way (the partner gives at most chunk.mb):
                # free memory on both nodes stays as it was.
                amount = min(chunk.mb, partner[1])
                moves.append(Move(guest.name, src, dst, amount,
                                  'exchange with %s' % partner[0]))
                moves.append(Move(partner[0], dst, src, amount,
                                  'exchange with %s' % guest.name))
                budget_mb -= 2 * amount
    return _merge(moves)


def _target(row, src, free, reserve_mb, total_mb):
    """The node to move ``src``'s memory to, None if there is none.

    The lowest-overhead node (then lowest id) at least ``LEVELS_LOWER``
    levels below ``src`` that has a chunk's room above ``reserve_mb``;
    when none has, the first of them (for an exchange). Nodes without
    memory are never targets.
    """
    lower = sorted((i for i in range(len(free))
                    if row[i] <= row[src] - LEVELS_LOWER and
                    (total_mb is None or total_mb[i] > 0)),
                   key=lambda i: (row[i], i))
    # Room for a chunk at least: no period spent on crumbs.
    with_room = [i for i in lower if free[i] - reserve_mb >= CHUNK_MB]
    return (with_room or lower or [None])[0]


def _exchange_partner(guests, guest, node, mb):
    """``(name, MiB)`` popped from another managed guest's FIFO on
    ``node``, at most ``mb``; None if none has any. A ``leave`` guest
    is the best partner: the node's overhead costs it least.
    """
    for other in sorted(guests, key=lambda g: g.name):
        if other.name == guest.name:
            continue
        chunks = other.fifo.pop(node, mb)
        if chunks:
            return other.name, sum(c.mb for c in chunks)
    return None


def _merge(moves):
    merged = collections.OrderedDict()
    for move in moves:
        key = (move.guest, move.src, move.dst)
        if key in merged:
            old = merged[key]
            merged[key] = dataclasses.replace(old, mb=old.mb + move.mb)
        else:
            merged[key] = move
    return list(merged.values())
