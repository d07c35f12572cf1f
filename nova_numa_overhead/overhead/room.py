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
"""Room on a node: free memory minus what guests have yet to touch there.

A guest's memory is allocated when it first touches it, so a node's free
memory overstates its room while guests are starting: memory they were
given but have not touched yet will land somewhere, and a guest confined
to nodes that fill up before it has all of its memory is killed out of
memory by its cgroup. Room counts that memory where the kernel will put
it: within the guest's nodeset, on the node its vCPUs run on first, then
the nearest nodes with room (the kernel's zonelist order). Guests with the
fewest nodes to choose from land first: they have no other place to go.
"""

import dataclasses


@dataclasses.dataclass(frozen=True, slots=True)
class Commitment:
    """Memory a guest was given and has not touched yet.

    ``nodes``: where it may land (its nodeset; () = every node);
    ``near``: the node its first touch starts from (where its vCPUs run),
    None when unknown.
    """

    mb: float
    nodes: tuple = ()
    near: int | None = None


def commitment(memory_mb: float, touched, nodes=(),
               near: int | None = None) -> Commitment:
    """A guest's commitment: its configured size minus what it touched
    (``touched``: (node, MiB) pairs).
    """
    left = float(memory_mb) - sum(max(mb, 0) for _node, mb in touched)
    return Commitment(max(left, 0.0), tuple(sorted(set(nodes))) if nodes
                      else (), near)


def landing(free_mb, distances, commitments) -> list:
    """MiB per node the commitments will take, as first touch puts them.

    A commitment takes the free memory of its nodes, nearest to ``near``
    first; what its nodes cannot hold at all is charged to its nearest
    node (its guest would be killed there: the room goes negative).
    """
    size = len(free_mb)
    left = [max(float(f), 0.0) for f in free_mb]
    taken = [0.0] * size
    ordered = sorted(
        (c for c in commitments if c.mb > 0),
        key=lambda c: (len(_nodes(c, size)), -c.mb))
    for c in ordered:
        nodes = _order(c, size, distances)
        want = c.mb
        for node in nodes:
            take = min(want, left[node])
            left[node] -= take
            taken[node] += take
            want -= take
            if want <= 0:
                break
        if want > 0 and nodes:
            taken[nodes[0]] += want
    return taken


def uncommitted_free(free_mb, distances, commitments) -> list:
    """Free MiB per node once the commitments have landed (negative where
    confined guests cannot get their memory).
    """
    taken = landing(free_mb, distances, commitments)
    return [int(f - t) for f, t in zip(free_mb, taken)]


def room(free_mb, nodes) -> int:
    """MiB the ``nodes`` can still give (per-node values as from
    :func:`uncommitted_free`).
    """
    return int(sum(free_mb[n] for n in nodes))


def _nodes(c: Commitment, size: int) -> list:
    nodes = [n for n in c.nodes if 0 <= n < size]
    return nodes or list(range(size))


def _order(c: Commitment, size: int, distances) -> list:
    nodes = _nodes(c, size)
    near = c.near if c.near is not None and 0 <= c.near < size else None
    if near is None:
        return sorted(nodes)
    row = distances[near]
    return sorted(nodes, key=lambda n: (n != near, row[n], n))
