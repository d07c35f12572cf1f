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
"""Property-based fuzzing of the report store, as a state machine.

Valid, mutated and arbitrary reports arrive for a few hosts, in any order,
while time passes, the store sweeps and requests look hosts up. Whatever
happens: ingest answers True or False and raises nothing, look-ups answer
a level, unknown or does-not-fit, the store never holds more than
max_hosts hosts, and a host's sequence number under one agent run never
goes back while the store holds the host.
"""

import math

from hypothesis import stateful
from hypothesis import strategies as st
from oslo_config import cfg

from nova_numa_overhead import conf as plugin_conf
from nova_numa_overhead.overhead import planner
from nova_numa_overhead import report as report_mod
from nova_numa_overhead.scheduler import store as store_mod
from tests import base
from tests.unit.scheduler import test_store
from tests.unit import test_report_fuzz as fuzz

HOSTS = ['cmp-%d' % i for i in range(7)]
MAX_HOSTS = 5
TTL = 60


class StoreMachine(stateful.RuleBasedStateMachine):

    def __init__(self):
        super().__init__()
        conf = plugin_conf.register_opts(cfg.ConfigOpts())
        conf([], project='nova')
        conf.set_override('max_hosts', MAX_HOSTS, group='numa_overhead')
        conf.set_override('report_ttl', TTL, group='numa_overhead')
        self.clock = test_store.FakeClock()
        self.store = store_mod.ReportStore(conf, clock=self.clock)
        self.seen = {}
        self.evicted = 0

    def _ingest(self, data):
        fuzz.COUNTS['tried'] += 1
        try:
            accepted = self.store.ingest(data)
        except BaseException:
            fuzz.COUNTS['escaped'] += 1
            raise
        assert accepted in (True, False)
        fuzz.COUNTS['accepted' if accepted else 'rejected'] += 1

    @stateful.rule(host=st.sampled_from(HOSTS), agent=st.sampled_from('xy'),
                   seq=st.integers(0, 3000) | st.sampled_from([2 ** 53 - 1]),
                   age=st.floats(0, 2 * TTL), nodes=st.integers(1, 3),
                   llc=st.integers(0, 8), planned=st.booleans())
    def report(self, host, agent, seq, age, nodes, llc, planned):
        self._ingest(base.make_report(
            host=host, agent_id=agent, seq=seq, age=age, nodes=nodes,
            llc=llc, guests=llc % 2, total_mb=16384, free_mb=2048 * llc,
            policy='proportional' if planned else None))

    @stateful.rule(data=fuzz.mutated_reports())
    def mutated(self, data):
        if isinstance(data, dict) and 'host' in data:
            data['host'] = HOSTS[len(repr(data)) % len(HOSTS)]
        self._ingest(data)

    @stateful.rule(data=fuzz.json_values())
    def anything(self, data):
        self._ingest(data)

    @stateful.rule(seconds=st.floats(0, 4 * TTL))
    def time_passes(self, seconds):
        self.clock.now += seconds

    @stateful.rule()
    def sweep(self):
        self.store.sweep()

    @stateful.rule(memory_mb=st.integers(1, 10 ** 7),
                   policy=st.sampled_from(planner.POLICIES),
                   max_nodes=st.integers(1, 8),
                   free_ram_mb=st.none() | st.integers(0, 100000),
                   num_instances=st.none() | st.integers(0, 40))
    def look_up(self, memory_mb, policy, max_nodes, free_ram_mb,
                num_instances):
        query = self.store.query(memory_mb, policy, max_nodes)
        for host in HOSTS:
            value = query.overhead(host, free_ram_mb, num_instances)
            assert value is None or value == math.inf or \
                0 <= value <= 4 * report_mod.MAX_LEVEL + 16 * 16, value

    @stateful.invariant()
    def bounded(self):
        assert len(self.store) <= MAX_HOSTS

    @stateful.invariant()
    def sequence_never_goes_back(self):
        if self.store.evicted != self.evicted:
            # A host silent for three TTLs was forgotten: it starts anew.
            self.evicted = self.store.evicted
            self.seen.clear()
        for host in HOSTS:
            entry = self.store._entries.get(host)
            if entry is None:
                self.seen.pop(host, None)
                continue
            before = self.seen.get(host)
            if before is not None and before[0] == entry.agent_id:
                assert entry.seq >= before[1], (host, before, entry.seq)
            self.seen[host] = (entry.agent_id, entry.seq)


class TestStoreFuzz(StoreMachine.TestCase):

    settings = base.fuzz(40, stateful_step_count=30)
