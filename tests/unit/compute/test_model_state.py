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
import os

import fixtures

from nova_numa_overhead.compute import agent as agent_mod
from nova_numa_overhead.compute import model_state
from nova_numa_overhead.compute import optimizer as opt_mod
from tests import base
from tests.unit.compute import fakes
from tests.unit.compute import test_agent


class Clock:

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class TestModelState(base.TestCase):

    def setUp(self):
        super().setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        self.path = os.path.join(self.dir, 'model.json')
        self.clock = Clock()

    def optimizer(self):
        agent = agent_mod.Agent(self.conf, fakes.FakeHypervisor(nodes=2),
                                test_agent.FakePublisher(), 'cmp-1')
        return agent.optimizer

    def keeper(self, optimizer, nodes=2, path=None):
        return model_state.Keeper(self.path if path is None else path,
                                  optimizer, nodes, clock=self.clock)

    def learn(self, optimizer):
        optimizer.trust = 0.45
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
        self.assertTrue(keeper.save())
        with open(self.path) as f:
            data = json.load(f)
        self.assertEqual(1, data['version'])
        self.assertEqual(2, data['nodes'])
        self.assertEqual(0.45, data['trust'])
        self.assertEqual([[1.2, 1.05], [1.1, 1.12]],
                         data['predictions']['guest'])
        self.assertRegex(data['saved_at'], r'^\d{4}-\d\d-\d\dT')
        self.assertEqual([], [n for n in os.listdir(self.dir)
                              if n.endswith('.tmp')])

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
                      '0.45, 2 verdicts of moved guests' % (
                          self.path, data['saved_at']), self.logger.output)

    def test_written_when_changed_at_most_once_a_minute(self):
        optimizer = self.optimizer()
        keeper = self.keeper(optimizer)
        keeper.restore()
        self.learn(optimizer)
        self.assertTrue(keeper.save())
        self.assertFalse(keeper.save())          # unchanged
        optimizer.trust = 0.3
        self.clock.now += model_state.SAVE_INTERVAL - 1
        self.assertFalse(keeper.save())          # too soon
        self.clock.now += 1
        self.assertTrue(keeper.save())
        optimizer.trust = 0.2
        self.assertTrue(keeper.save(force=True))  # the agent stops
        with open(self.path) as f:
            self.assertEqual(0.2, json.load(f)['trust'])

    def test_unusable_files_are_a_warning_and_a_fresh_start(self):
        good = {'version': 1, 'nodes': 2, 'trust': 0.5, 'saved_at': '',
                'predictions': {'guest': [], 'neighbours': []}}
        for content, words in (
                ('{', 'not JSON'),
                ('[]', 'not a JSON object'),
                (dict(good, version=2), 'version 2, not 1'),
                (dict(good, nodes=0), 'nodes 0 is not a count'),
                (dict(good, nodes=True), 'nodes True is not a count'),
                (dict(good, trust=1.5), 'trust 1.5 is not a number from '
                                        '0.1 to 1'),
                (dict(good, trust='0.5'), "trust '0.5' is not a number"),
                (dict(good, trust=False), 'trust False is not a number'),
                (dict(good, saved_at=3), 'saved_at 3 is not a time'),
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
                ('{"version": 1, "nodes": 2, "trust": 0.5, "predictions": '
                 '{"guest": [[NaN, 1]], "neighbours": []}}',
                 'predictions.guest holds [nan, 1]'),
                (dict(good, nodes=4), 'written on a host of 4 NUMA nodes, '
                                      'this one has 2')):
            with open(self.path, 'w') as f:
                f.write(content if isinstance(content, str)
                        else json.dumps(content))
            before = len(self.logger.output)
            optimizer = self.optimizer()
            self.assertFalse(self.keeper(optimizer).restore(), words)
            self.assertEqual(opt_mod.TRUST_START, optimizer.trust)
            logged = self.logger.output[before:]
            self.assertIn('Cost model state not restored, starting afresh',
                          logged)
            self.assertIn(words, logged)
        # Unreadable: a directory where the file should be.
        os.unlink(self.path)
        os.mkdir(self.path)
        self.assertFalse(self.keeper(self.optimizer()).restore())
        self.assertIn('cannot read %s' % self.path, self.logger.output)

    def test_a_failed_write_warns_once_and_keeps_the_state_in_memory(self):
        path = os.path.join(self.dir, 'missing', 'model.json')
        optimizer = self.optimizer()
        keeper = self.keeper(optimizer, path=path)
        keeper.restore()
        self.learn(optimizer)
        self.assertFalse(keeper.save())
        optimizer.trust = 0.3
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
