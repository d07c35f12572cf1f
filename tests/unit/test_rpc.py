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
"""The RPC servers the plugin starts, without a broker."""

from unittest import mock

import oslo_messaging as messaging

from nova_numa_overhead import rpc
from tests import base


class TestServerNames(base.TestCase):

    def test_restarts_and_workers_of_a_host_share_one_server_queue(self):
        # oslo.messaging keeps a '<topic>.<server>' queue per server name:
        # a name per process left one behind at every restart.
        self.flags(sync_on_start=False)
        self.addCleanup(rpc.stop_listeners)
        with mock.patch.object(messaging, 'get_rpc_server',
                               autospec=True) as get_server, \
                mock.patch('socket.gethostname', autospec=True,
                           return_value='ctl-1'):
            for pid in (4001, 4002, 4001):
                with mock.patch('os.getpid', autospec=True, return_value=pid):
                    rpc.start_scheduler_listener(self.conf, None,
                                                 mock.sentinel.transport)
                    rpc.start_agent_listener(self.conf, None,
                                             mock.sentinel.transport)
        self.assertEqual(
            {('numa-overhead', 'scheduler-ctl-1'),
             ('numa-overhead.agents', 'agent-ctl-1')},
            {(call.args[1].topic, call.args[1].server)
             for call in get_server.call_args_list})
