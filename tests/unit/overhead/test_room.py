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

from hypothesis import given
from hypothesis import strategies as st
import testtools

from nova_numa_overhead.overhead import room
from tests import base

GIB = 1024
# Four nodes in a line: 0 - 1 - 2 - 3.
LINE = [[10, 16, 22, 28], [16, 10, 16, 22], [22, 16, 10, 16],
        [28, 22, 16, 10]]


class TestCommitment(testtools.TestCase):

    def test_configured_minus_touched(self):
        c = room.commitment(8 * GIB, {0: 2 * GIB, 1: GIB}.items(), (1, 0),
                            near=0)
        self.assertEqual(5 * GIB, c.mb)
        self.assertEqual((0, 1), c.nodes)
        self.assertEqual(0, c.near)

    def test_never_negative(self):
        # A guest that touched more than its flavor (a balloon resized).
        self.assertEqual(0, room.commitment(GIB, {0: 2 * GIB}.items()).mb)


class TestLanding(testtools.TestCase):

    def test_first_touch_near_then_nearest_with_room(self):
        free = [4 * GIB, 4 * GIB, 4 * GIB, 4 * GIB]
        c = room.Commitment(10 * GIB, near=1)
        # Node 1 first, then its neighbours (0 and 2 at 16: the lower id),
        # never the far end while nearer nodes have room.
        self.assertEqual([4 * GIB, 4 * GIB, 2 * GIB, 0],
                         room.landing(free, LINE, [c]))

    def test_confined_lands_in_its_nodeset_only(self):
        free = [4 * GIB] * 4
        c = room.Commitment(6 * GIB, nodes=(2, 3), near=0)
        self.assertEqual([0, 0, 4 * GIB, 2 * GIB],
                         room.landing(free, LINE, [c]))

    def test_confined_guests_land_first(self):
        # The unconfined guest could go anywhere, the confined one only to
        # node 0: node 0 is the confined one's, whatever the order given.
        free = [4 * GIB, 8 * GIB, 0, 0]
        loose = room.Commitment(4 * GIB, near=0)
        tight = room.Commitment(4 * GIB, nodes=(0,), near=0)
        for order in ([loose, tight], [tight, loose]):
            self.assertEqual([4 * GIB, 4 * GIB, 0, 0],
                             room.landing(free, LINE, order))

    def test_what_cannot_fit_makes_room_negative(self):
        free = [2 * GIB, 8 * GIB, 0, 0]
        c = room.Commitment(3 * GIB, nodes=(0,))
        self.assertEqual([-GIB, 8 * GIB, 0, 0],
                         room.uncommitted_free(free, LINE, [c]))

    def test_nothing_committed_is_free_memory(self):
        free = [GIB, 2 * GIB, 3 * GIB, 4 * GIB]
        self.assertEqual(free, room.uncommitted_free(
            free, LINE, [room.Commitment(0, near=0)]))
        self.assertEqual(3 * GIB, room.room(free, (0, 1)))

    @given(st.lists(st.integers(0, 64 * GIB), min_size=4, max_size=4),
           st.lists(st.tuples(st.integers(0, 32 * GIB),
                              st.sets(st.integers(0, 3)),
                              st.one_of(st.none(), st.integers(0, 3))),
                    max_size=8))
    @base.fuzz(200)
    def test_every_mib_lands_once(self, free, specs):
        commitments = [room.Commitment(mb, tuple(sorted(nodes)), near)
                       for mb, nodes, near in specs]
        taken = room.landing(free, LINE, commitments)
        self.assertAlmostEqual(sum(c.mb for c in commitments), sum(taken))
        for c in commitments:
            alone = room.landing(free, LINE, [c])
            self.assertEqual(0, sum(mb for node, mb in enumerate(alone)
                                    if c.nodes and node not in c.nodes))
        after = room.uncommitted_free(free, LINE, commitments)
        for node, value in enumerate(after):
            # Only what cannot fit anywhere it may go makes room negative:
            # a confined guest's nodes, or a host full everywhere.
            if value < 0:
                self.assertTrue(any(
                    c.nodes and node in c.nodes for c in commitments) or
                    max(after) <= 0, (node, after))
