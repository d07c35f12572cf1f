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
"""A scheduler-side report store in a process of its own (integration tests).

Usage: python -m tests.integration.listener TRANSPORT_URL TOPIC SYNC

Prints ``ready`` once listening, then one line ``hosts {...}`` (host ->
sequence number) every time the store's content changes. Exits when its
standard input closes.
"""

import json
import sys
import threading
import time

from oslo_config import cfg

from nova_numa_overhead import conf as plugin_conf
from nova_numa_overhead import rpc
from nova_numa_overhead.scheduler import store as store_mod


def main(argv):
    url, topic, sync = argv[1], argv[2], argv[3] == 'sync'
    conf = plugin_conf.register_opts(cfg.CONF)
    conf([], project='nova')
    conf.set_override('transport_url', url, group='numa_overhead')
    conf.set_override('report_topic', topic, group='numa_overhead')
    conf.set_override('sync_on_start', sync, group='numa_overhead')
    reports = store_mod.ReportStore(conf)
    server = rpc.start_scheduler_listener(conf, reports)
    print('ready', flush=True)
    done = threading.Event()

    def watch_stdin():
        sys.stdin.read()
        done.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    last = None
    while not done.is_set():
        seen = {h: reports.get(h).report.seq for h in reports.hosts()
                if reports.get(h)}
        if seen != last:
            print('hosts ' + json.dumps(seen, sort_keys=True), flush=True)
            last = seen
        time.sleep(0.05)
    server.stop()
    server.wait()


if __name__ == '__main__':
    main(sys.argv)
