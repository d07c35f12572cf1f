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

import json
import math
import os
import time
from unittest import mock

import fixtures

from nova_numa_overhead.compute import agent as agent_mod
from nova_numa_overhead.compute import model_state
from nova_numa_overhead.compute import optimizer as opt_mod
from tests import base
from tests.unit.compute import fakes
from tests.unit.compute import test_agent


class TestModelState(base.TestCase):

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        self.path = os.path.join(self.dir, 'model.json')
        self.clock = test_agent.Clock()

    def optimizer(self):
        agent = agent_mod.Agent(self.conf, fakes.FakeHypervisor(nodes=2),
                                test_agent.FakePublisher(), 'cmp-1')
        return agent.optimizer

    def learned_for(self, **changes):
        out = {'plugin': '1.0', 'host': 'cmp-1', 'nodes': 2,
               'distances': [[10, 21], [21, 10]], 'topology_file': '',
               'matrix': '', 'node_bandwidth_mbps': 20000}
        out.update(changes)
        return out

    def keeper(self, optimizer, path=None, **changes):
        return model_state.Keeper(self.path if path is None else path,
                                  optimizer, self.learned_for(**changes),
                                  clock=self.clock)

    def learned(self, path=None):
        """A keeper started without a file, its optimizer taught."""
        optimizer = self.optimizer()
        keeper = self.keeper(optimizer, path=path)
        keeper.restore()
        self.learn(optimizer)
        return optimizer, keeper

    def learn(self, optimizer):
        optimizer.trust = optimizer.learned_trust = 0.45
        optimizer.predictions['guest'].extend([(1.2, 1.05), (1.1, 1.12)])
        optimizer.predictions['neighbours'].append((0.97, 0.95))

    def test_a_restarted_agent_keeps_what_it_learned(self):
        first = self.optimizer()
        keeper = self.keeper(first)
        self.assertFalse(keeper.restore())
        self.assertIn('No cost model state in %s yet' % self.path,
                      self.logger.output)
        # Nothing learned yet: nothing written.
        self.assertFalse(keeper.save(force=True))
        self.assertFalse(os.path.exists(self.path))
        self.learn(first)
        # Looked at a moment ago: the next look comes a minute later.
        self.assertFalse(keeper.save())
        self.clock.now += model_state.SAVE_INTERVAL
        self.assertTrue(keeper.save())
        with open(self.path) as f:
            data = json.load(f)
        self.assertEqual(1, data['version'])
        self.assertEqual(self.learned_for(), data['learned_for'])
        self.assertEqual(0.45, data['trust'])
        self.assertEqual([[1.2, 1.05], [1.1, 1.12]],
                         data['predictions']['guest'])
        self.assertRegex(data['saved_at'], r'^\d{4}-\d\d-\d\dT')
        self.assertEqual(['model.json'], os.listdir(self.dir))
        self.assertEqual(model_state.MODE,
                         os.stat(self.path).st_mode & 0o777)

        second = self.optimizer()
        self.assertEqual(opt_mod.TRUST_START, second.trust)
        self.assertTrue(self.keeper(second).restore())
        self.assertEqual(0.45, second.trust)
        self.assertEqual(list(first.predictions['guest']),
                         list(second.predictions['guest']))
        self.assertEqual([(0.97, 0.95)],
                         list(second.predictions['neighbours']))
        self.assertEqual(first.calibration(), second.calibration())
        self.assertIn('Cost model state restored from %s (saved %s): trust '
                      '0.45, predictions of 2 moved guests' % (
                          self.path, data['saved_at']), self.logger.output)

    def test_pairs_a_restart_would_refuse_are_not_written(self):
        # One infinite or negative speed would have the whole file (the
        # trust, every pair) refused at the next start.
        optimizer, keeper = self.learned()
        optimizer.predictions['guest'].extend(
            [(math.inf, 1.0), (1.0, math.nan), (-0.1, 1.0)])
        self.assertTrue(keeper.save(force=True))
        restored = self.optimizer()
        self.assertTrue(self.keeper(restored).restore())
        self.assertEqual([(1.2, 1.05), (1.1, 1.12)],
                         list(restored.predictions['guest']))
        self.assertEqual(0.45, restored.trust)

    def test_a_trust_that_is_not_a_number_is_not_written(self):
        optimizer, keeper = self.learned()
        self.assertTrue(keeper.save(force=True))
        optimizer.trust = optimizer.learned_trust = math.nan
        self.assertFalse(keeper.save(force=True))
        self.assertIn('Cost model state not saved', self.logger.output)
        # The file written before stays.
        self.assertTrue(self.keeper(self.optimizer()).restore())

    def test_written_when_changed_at_most_once_a_minute(self):
        optimizer, keeper = self.learned()
        self.assertTrue(keeper.save())
        self.assertFalse(keeper.save())          # unchanged
        # Called every cycle, it looks at the state once a minute.
        with mock.patch.object(keeper, '_snapshot',
                               wraps=keeper._snapshot) as snapshot:
            for _ in range(120):
                self.clock.now += 1
                self.assertFalse(keeper.save())
        self.assertEqual(2, snapshot.call_count)
        optimizer.trust = optimizer.learned_trust = 0.3
        self.clock.now += model_state.SAVE_INTERVAL - 1
        self.assertFalse(keeper.save())          # too soon
        self.clock.now += 1
        self.assertTrue(keeper.save())
        optimizer.trust = optimizer.learned_trust = 0.2
        self.assertTrue(keeper.save(force=True))  # the agent stops
        with open(self.path) as f:
            self.assertEqual(0.2, json.load(f)['trust'])

    def test_unusable_files_are_set_aside_and_a_fresh_start(self):
        good = {'version': 1, 'trust': 0.5, 'saved_at': '',
                'learned_for': self.learned_for(),
                'predictions': {'guest': [], 'neighbours': []}}
        deep = '[' * 100000 + ']' * 100000
        for content, words in (
                ('{', 'not JSON'),
                (deep, 'not JSON'),
                ('[]', 'not a JSON object'),
                (' ' * (model_state.MAX_BYTES + 1), 'larger than'),
                (dict(good, version=2), 'version 2, not 1'),
                (dict(good, trust=1.5), 'trust 1.5 is not a number from '
                                        '0.1 to 1'),
                (dict(good, trust='0.5'), "trust '0.5' is not a number"),
                (dict(good, trust=False), 'trust False is not a number'),
                (dict(good, trust=10 ** 400), 'trust 1000000'),
                (dict(good, saved_at=3), 'saved_at 3 is not a UTC time'),
                (dict(good, saved_at='2026-11-29\nx'),
                 "saved_at '2026-11-29\\nx' is not a UTC time"),
                (dict(good, learned_for=[]), 'learned_for is not a JSON'),
                (dict(good, predictions={'guest': []}),
                 'predictions must hold exactly guest and neighbours'),
                (dict(good, predictions={'guest': {}, 'neighbours': []}),
                 'predictions.guest is not a list'),
                (dict(good, predictions={'guest': [[1.0]],
                                         'neighbours': []}),
                 'predictions.guest holds [1.0], not a pair'),
                (dict(good, predictions={'guest': [],
                                         'neighbours': [[1.0, -1]]}),
                 'predictions.neighbours holds [1.0, -1]'),
                (dict(good, predictions={'guest': [[1.0, 10 ** 400]],
                                         'neighbours': []}),
                 'predictions.guest holds [1.0, 1000'),
                ('{"version": 1, "trust": 0.5, "learned_for": {}, '
                 '"predictions": {"guest": [[NaN, 1]], "neighbours": []}}',
                 'predictions.guest holds [nan, 1]')):
            text = content if isinstance(content, str) else \
                json.dumps(content)
            with open(self.path, 'w') as f:
                f.write(text)
            before = len(self.logger.output)
            optimizer = self.optimizer()
            self.assertFalse(self.keeper(optimizer).restore(), words)
            self.assertEqual(opt_mod.TRUST_START, optimizer.trust)
            logged = self.logger.output[before:]
            self.assertIn('Cost model state not restored, starting afresh',
                          logged)
            self.assertIn(words, logged)
            self.assertEqual(1, len(logged.splitlines()), words)
            self.assertLess(len(logged), 400, words)
            # Set aside, not lost (nor overwritten by the next save).
            self.assertIn('(set aside as %s.bad)' % self.path, logged)
            self.assertFalse(os.path.exists(self.path))
            with open(self.path + '.bad') as f:
                self.assertEqual(text, f.read())
        # Unreadable: a directory where the file should be; left there.
        os.mkdir(self.path)
        self.assertFalse(self.keeper(self.optimizer()).restore())
        self.assertIn('cannot read %s' % self.path, self.logger.output)
        self.assertTrue(os.path.isdir(self.path))

    def test_learned_for_another_model_is_a_fresh_start(self):
        _first, keeper = self.learned()
        self.assertTrue(keeper.save())
        for changes, words in (
                ({'plugin': '1.1'}, 'plugin version'),
                ({'host': 'cmp-2'}, 'host name'),
                ({'nodes': 4}, 'NUMA node count'),
                ({'distances': [[10, 32], [32, 10]]}, 'NUMA distances'),
                ({'topology_file': '/x.json'}, 'topology_file'),
                ({'matrix': 'abc'}, 'latency and bandwidth matrix'),
                ({'node_bandwidth_mbps': 1}, 'node_bandwidth_mbps')):
            optimizer = self.optimizer()
            self.assertFalse(self.keeper(optimizer, **changes).restore())
            self.assertEqual(opt_mod.TRUST_START, optimizer.trust)
            self.assertIn('Cost model state in %s not restored, starting '
                          'afresh: it was learned for another %s' % (
                              self.path, words), self.logger.output)
        # Not set aside: it is replaced at the next save.
        self.assertEqual(['model.json'], os.listdir(self.dir))

    def test_a_probe_run_again_into_the_same_file_is_another_model(self):
        from nova_numa_overhead.compute import probe
        path = os.path.join(self.dir, 'topology.json')
        self.flags(group='numa_overhead_agent', topology_file=path)

        def learned_for(latency):
            probe.save(probe.Matrix(
                latency_ns=[[100.0, latency], [latency, 100.0]],
                bandwidth_mbps=[[5e4, 2e4], [2e4, 5e4]], nodes=[0, 1],
                measured_at='2026-11-29', size_mb=256,
                bandwidth_streams=[8, 8]), path)
            agent = agent_mod.Agent(self.conf, fakes.FakeHypervisor(nodes=2),
                                    test_agent.FakePublisher(), 'cmp-1')
            return model_state.learned_for(self.conf, 'cmp-1',
                                           agent.topology,
                                           agent.estimator_topology)

        first = learned_for(130.0)
        self.assertEqual(path, first['topology_file'])
        self.assertEqual(16, len(first['matrix']))
        self.assertEqual(first, learned_for(130.0))
        again = learned_for(160.0)
        self.assertEqual(['matrix'],
                         model_state.differs({'learned_for': first}, again))
        # No matrix: SLIT answers, nothing to tell apart.
        self.assertEqual('', model_state.matrix_digest(None))

    def test_the_time_the_agent_was_stopped_counts_towards_recovery(self):
        _first, keeper = self.learned()
        self.assertTrue(keeper.save())
        with open(self.path) as f:
            data = json.load(f)
        saved = data['trust']
        self.assertLess(saved, 1.0)
        # Taught by no verdict of this run (set by hand): no time.
        self.assertEqual('', data['learned_at'])
        half = 1.0 - (1.0 - saved) / 2
        now = model_state.utc(time.time())
        for learned, saved_at, trust in (
                # Half an hour ago: half an hour more to wait.
                (0.5, 0, saved),
                # Seven hours ago, saved just now (the agent stopped
                # while it recovered): half the way back.
                (7, 0, half),
                # No time of the verdict: the time of the save.
                (None, 7, half)):
            data['learned_at'] = '' if learned is None else \
                model_state.utc(time.time() - learned * 3600)
            data['saved_at'] = model_state.utc(time.time() - saved_at * 3600)
            with open(self.path, 'w') as f:
                json.dump(data, f)
            optimizer = self.optimizer()
            keeper = self.keeper(optimizer)
            self.assertTrue(keeper.restore())
            self.assertAlmostEqual(trust, optimizer.trust, places=3)
            # Nothing to write: the file holds what the verdict taught.
            self.assertFalse(keeper.save(force=True))
        self.assertIn('trust %.2f (%.2f saved, recovered since %s)' % (
            optimizer.trust, saved, data['saved_at']), self.logger.output)
        # The half hour left of the first: recovery starts then.
        data['learned_at'] = model_state.utc(time.time() - 1800)
        with open(self.path, 'w') as f:
            json.dump(data, f)
        optimizer = self.optimizer()
        self.assertTrue(self.keeper(optimizer).restore())
        at = optimizer.agent.clock()
        optimizer._recover_trust(at + 1700)
        self.assertEqual(saved, optimizer.trust)
        optimizer._recover_trust(at + 1900 + opt_mod.TRUST_HALF_LIFE)
        self.assertAlmostEqual(half, optimizer.trust, places=2)
        # A time in the future (a clock set back) or none: no recovery.
        self.assertEqual(0.0, model_state.age('2999-01-01T00:00:00Z'))
        self.assertEqual(0.0, model_state.age(''))
        self.assertIsNone(model_state.epoch('not a time'))
        self.assertEqual('', model_state.utc(None))
        self.assertEqual(now, model_state.utc(model_state.epoch(now)))
        # A learned_at that is not a time: the file is not used.
        for bad in ('yesterday', '2026-13-45T99:99:99Z'):
            data['learned_at'] = bad
            with open(self.path, 'w') as f:
                json.dump(data, f)
            self.assertFalse(self.keeper(self.optimizer()).restore())
            self.assertIn('learned_at %r is not a UTC time' % bad,
                          self.logger.output)

    def test_a_crash_during_a_save_leaves_nothing_behind(self):
        leftover = os.path.join(self.dir, 'model.json.abc123.tmp')
        other = os.path.join(self.dir, 'other.json.abc123.tmp')
        for path in (leftover, other):
            with open(path, 'w') as f:
                f.write('{')
        optimizer, keeper = self.learned()
        self.assertEqual(['other.json.abc123.tmp'], os.listdir(self.dir))
        # A write that fails half-way leaves the old file and no temporary
        # one.
        self.assertTrue(keeper.save())
        optimizer.trust = optimizer.learned_trust = 0.2
        with mock.patch.object(model_state.json, 'dump', autospec=True,
                               side_effect=OSError(28, 'No space left')):
            self.assertFalse(keeper.save(force=True))
        self.assertEqual(['model.json', 'other.json.abc123.tmp'],
                         sorted(os.listdir(self.dir)))
        with open(self.path) as f:
            self.assertEqual(0.45, json.load(f)['trust'])

    def test_a_failed_write_warns_once_and_keeps_the_state_in_memory(self):
        path = os.path.join(self.dir, 'missing', 'model.json')
        optimizer, keeper = self.learned(path)
        self.assertFalse(keeper.save())
        optimizer.trust = optimizer.learned_trust = 0.3
        self.clock.now += model_state.SAVE_INTERVAL
        self.assertFalse(keeper.save())
        self.assertEqual(1, self.logger.output.count(
            'Cost model state not saved'))
        self.assertIn('cannot write %s' % path, self.logger.output)
        self.assertEqual(0.3, optimizer.trust)
        os.mkdir(os.path.dirname(path))
        self.clock.now += model_state.SAVE_INTERVAL
        self.assertTrue(keeper.save())
        self.assertIn('Cost model state saved to %s again' % path,
                      self.logger.output)
        self.assertEqual(['model.json'], os.listdir(os.path.dirname(path)))

    def test_no_file_configured(self):
        optimizer = self.optimizer()
        keeper = self.keeper(optimizer, path='')
        self.assertFalse(keeper.restore())
        self.learn(optimizer)
        self.assertFalse(keeper.save(force=True))
        self.assertEqual([], os.listdir(self.dir))
