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
"""libvirt's event loop and the agent during a broker outage.

The agent service (cmd/agent.py, as shipped) on libvirt's test driver,
reporting to the shared RabbitMQ through a TCP proxy this script cuts for
``--outage`` seconds (the broker itself is never touched); see
tests/integration/outage.py. Printed: the longest gap between ticks of a
100 ms libvirt timer before, during and after the outage (keepalive runs
on that thread: a long gap drops the connection on a real host), the
guests placed during the outage, and the log lines saying that reports do
not go out. Not a test: nothing is asserted.

Run: python benchmarks/broker_outage.py [--outage 60] [--every 5]
(needs RabbitMQ at 127.0.0.1:5672 and libvirt-python).
"""

import argparse
import json
import logging
import os
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

from oslo_config import cfg  # noqa: E402

# The package chooses oslo.service's threading backend, before anything of
# oslo.messaging asks for one.
from tests.integration import outage as outage_mod  # noqa: E402


class Lines(logging.Handler):
    """The log lines that say reports are not going out."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        message = record.getMessage()
        if any(w in message for w in outage_mod.OUTAGE_WORDS):
            self.lines.append((time.monotonic(), record.levelname, message))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--outage', type=float, default=60.0)
    parser.add_argument('--every', type=float, default=5.0)
    args = parser.parse_args(argv)
    lines = Lines()
    logging.getLogger().addHandler(lines)
    logging.getLogger().setLevel(logging.INFO)
    run = outage_mod.OutageRun('numa-overhead-bench-' + uuid.uuid4().hex[:8])
    try:
        run.start(cfg.CONF)
        result = run.run(args.outage, every=args.every)
        print(json.dumps({
            'outage_s': args.outage,
            'max_tick_gap_s': {'before': round(result.max_gap_before, 3),
                               'during': round(result.max_gap_during, 3),
                               'after': round(result.max_gap_after, 3)},
            'guests_started_during_outage': len(result.started_during),
            'placed_during_outage': len(result.placed_during),
            'placed_by_the_end': len(result.placed_by_end),
            'outage_log_lines': ['%s %s' % (level, message[:100])
                                 for _t, level, message in lines.lines],
        }, indent=2))
    finally:
        run.stop()
    return 0


if __name__ == '__main__':
    sys.exit(main())
