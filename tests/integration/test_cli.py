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
"""The commands' broker errors against the real RabbitMQ: one line each.

(A broker port where nothing listens is in tests/unit/cmd/test_main.py.)
"""

import io
import uuid

import fixtures
from oslo_config import cfg
from oslo_messaging import conffixture as messaging_conffixture

from nova_numa_overhead.cmd import main as main_cmd
from tests import base
from tests.integration import test_rabbitmq


class TestBrokerErrors(base.TestCase):

    def setUp(self):
        super().setUp()
        if not test_rabbitmq.broker_reachable():
            self.fail('RabbitMQ is not reachable at 127.0.0.1:5672')
        # reports parses the global CONF: a fresh one for this test.
        fresh = cfg.ConfigOpts()
        self.useFixture(messaging_conffixture.ConfFixture(fresh))
        self.useFixture(fixtures.MonkeyPatch('oslo_config.cfg.CONF', fresh))
        self.stdout = self.useFixture(
            fixtures.MonkeyPatch('sys.stdout', io.StringIO())).new_value
        self.stderr = self.useFixture(
            fixtures.MonkeyPatch('sys.stderr', io.StringIO())).new_value

    def run_main(self, *argv):
        try:
            rc = main_cmd.main(list(argv))
        except SystemExit as exc:
            rc = exc.code
        err = self.stderr.getvalue()
        lines = err.splitlines()
        self.assertEqual(1, len(lines), err)
        self.assertNotIn('Traceback', err)
        return rc, lines[0]

    def test_demo_with_bad_credentials(self):
        rc, line = self.run_main(
            'demo', '--scheduler-only', '--transport-url',
            'rabbit://nobody:wrong@127.0.0.1:5672/')
        self.assertEqual(1, rc)
        self.assertEqual("nova-numa-overhead demo: cannot reach the broker "
                         "at rabbit://nobody:***@127.0.0.1:5672/: "
                         "127.0.0.1:5672 refused the login of user "
                         "'nobody'", line)
        self.assertEqual('', self.stdout.getvalue())

    def test_reports_on_a_virtual_host_that_does_not_exist(self):
        vhost = 'nno-missing-' + uuid.uuid4().hex[:8]
        rc, line = self.run_main(
            'reports', '--config-file', '/dev/null', '--transport-url',
            'rabbit://guest:guest@127.0.0.1:5672/' + vhost)
        self.assertEqual(1, rc)
        self.assertIn("user 'guest' may not use virtual host '%s'" % vhost,
                      line)
