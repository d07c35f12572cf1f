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
"""One thread ingests while others filter and weigh (a scheduler worker
whose RPC executor and request threads share the store).
"""

import threading

from nova.scheduler import weights as nova_weights

from nova_numa_overhead.scheduler import filters
from nova_numa_overhead.scheduler import store as store_mod
from nova_numa_overhead.scheduler import weighers
from tests import base
from tests.unit.scheduler import fakes

HOSTS = ['cmp-%03d' % i for i in range(150)]
ROUNDS = 12
READS = 25
# Two reports alternate for every host: planned overhead 1 (one node at
# LLC 1) or 5 (LLC 2 + MC 3) for a 2 GiB guest.
LOW, HIGH = 1.0, 5.0


def report(host, seq, high):
    return base.make_report(host=host, nodes=1, llc=2 if high else 1,
                            mc=3 if high else 0, guests=1, seq=seq,
                            policy='proportional')


class TestConcurrentIngestAndLookups(fakes.NovaTestCase):

    def test_ingest_while_filtering_and_weighing(self):
        # The weigher on (off, its default, it looks nothing up).
        self.flags(weight_multiplier=1.0, group='numa_overhead')
        store = fakes.make_store(self, *[report(h, 1, False) for h in HOSTS])
        spec_obj = fakes.spec(memory_mb=2048,
                              extra_specs={'numa_overhead:max_level': '3'})
        hosts = [fakes.host_state(h, free_ram_mb=10 ** 6, num_instances=1)
                 for h in HOSTS + ['unknown']]
        errors = []
        answers = []

        def ingest():
            for seq in range(2, ROUNDS + 2):
                for host in HOSTS:
                    store.ingest(report(host, seq, high=seq % 2 == 1))
                store.ingest({'host': 'cmp-000', 'nodes': 'broken'})
                store.sweep()

        def look_up():
            filt = filters.NUMAOverheadFilter()
            weigher = weighers.NUMAOverheadWeigher()
            for _ in range(READS):
                passed = filt.filter_all(hosts, spec_obj)
                names = [h.host for h in passed]
                # Unknown hosts pass; a known host passes at LOW only.
                assert 'unknown' in names, names
                assert set(names) <= set(HOSTS + ['unknown'])
                raw = weigher.weigh_objects(
                    [nova_weights.WeighedHost(h, 0.0) for h in hosts],
                    spec_obj)
                assert len(raw) == len(hosts)
                allowed = {1 / (1 + LOW), 1 / (1 + HIGH)}
                assert set(raw[:-1]) <= allowed, set(raw) - allowed
                assert raw[-1] == 0.0
                answers.append(len(names))

        def guarded(func):
            def run():
                try:
                    func()
                except BaseException as exc:
                    errors.append(exc)
            return run

        threads = [threading.Thread(target=guarded(ingest))]
        threads += [threading.Thread(target=guarded(look_up))
                    for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            # Bounded: minutes on the slowest machine, never forever.
            thread.join(timeout=300)
        self.assertFalse(any(t.is_alive() for t in threads))
        self.assertEqual([], errors)
        self.assertEqual(3 * READS, len(answers))
        # Every report was taken, in order, and the answers are the last.
        self.assertEqual(len(HOSTS) * (ROUNDS + 1), store.accepted)
        self.assertNotIn('Traceback', self.logger.output)
        self.assertNotIn('look-up failed', self.logger.output)
        last_high = (ROUNDS + 1) % 2 == 1
        self.assertEqual(
            [HIGH if last_high else LOW] * len(HOSTS),
            [store.planned_overhead(h, None, None, 2048, 'proportional', 4)
             for h in HOSTS])
        self.assertIsInstance(store.get(HOSTS[0]), store_mod.HostEntry)
