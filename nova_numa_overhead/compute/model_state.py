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
"""What the optimizer learned of the cost model's fit on this host, kept
across agent restarts.

The trust (how far the model's predicted gains came true at the closed
loop's verdicts, :attr:`Optimizer.trust
<nova_numa_overhead.compute.optimizer.Optimizer.trust>`) and the
(predicted, measured) pairs behind the calibration summary live in
memory: without this file a restarted agent (an upgrade, a configuration
change) trusts the model fully again, and on a host whose costs the
model misjudges makes again the larger moves its verdicts had made it
shy of. ``[numa_overhead_agent] state_file`` names the file. The agent
service reads it when it starts and writes it (a temporary file in the
same directory, then a rename: a crash leaves the old file or the new
one) at most every SAVE_INTERVAL seconds once a verdict changed what it
holds, and when it stops. ``status`` shows it.

No file is a first start. A file the agent cannot read or parse, or one
written on a host with another number of NUMA nodes, is one warning line
and a fresh start (it is replaced once a verdict changes the state); a
file it cannot write is one warning line, and the state stays in memory:
the agent goes on either way.
"""

import json
import math
import os
import time

from oslo_log import log as logging

LOG = logging.getLogger(__name__)

VERSION = 1
SAVE_INTERVAL = 60.0      # seconds between two writes at most
KINDS = ('guest', 'neighbours')


class StateError(ValueError):
    """A state file that cannot be used (one line, naming the file)."""


def _pairs(path, kind, value) -> list:
    if not isinstance(value, list):
        raise StateError('%s: predictions.%s is not a list' % (path, kind))
    out = []
    for pair in value:
        if not (isinstance(pair, list) and len(pair) == 2 and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and
                math.isfinite(v) and v >= 0 for v in pair)):
            raise StateError('%s: predictions.%s holds %r, not a pair of '
                             'speeds >= 0' % (path, kind, pair))
        out.append((float(pair[0]), float(pair[1])))
    return out


def validate(path, data, trust_min: float) -> dict:
    """``data`` read from ``path``, checked: {'version', 'nodes', 'trust',
    'saved_at', 'predictions': {kind: [(predicted, measured), ...]}}.

    :raises StateError: naming the file and what is wrong.
    """
    if not isinstance(data, dict):
        raise StateError('%s: not a JSON object' % path)
    if data.get('version') != VERSION:
        raise StateError('%s: version %r, not %d' % (
            path, data.get('version'), VERSION))
    nodes = data.get('nodes')
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
        raise StateError('%s: nodes %r is not a count of NUMA nodes' % (
            path, nodes))
    trust = data.get('trust')
    if not isinstance(trust, (int, float)) or isinstance(trust, bool) or \
            not trust_min <= trust <= 1.0:
        raise StateError('%s: trust %r is not a number from %g to 1' % (
            path, trust, trust_min))
    saved = data.get('saved_at', '')
    if not isinstance(saved, str):
        raise StateError('%s: saved_at %r is not a time' % (path, saved))
    predictions = data.get('predictions')
    if not isinstance(predictions, dict) or \
            set(predictions) != set(KINDS):
        raise StateError('%s: predictions must hold exactly %s' % (
            path, ' and '.join(KINDS)))
    return {'version': VERSION, 'nodes': nodes, 'trust': float(trust),
            'saved_at': saved,
            'predictions': {kind: _pairs(path, kind, predictions[kind])
                            for kind in KINDS}}


def load(path, trust_min: float) -> dict | None:
    """The state in ``path`` (:func:`validate`), None when there is no
    such file.

    :raises StateError: the file cannot be read or used.
    """
    try:
        with open(path, encoding='utf-8') as f:
            text = f.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise StateError('cannot read %s: %s' % (path, exc))
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise StateError('%s: not JSON: %s' % (path, exc))
    return validate(path, data, trust_min)


def save(path, data: dict) -> None:
    """Write ``data`` to ``path`` atomically (same directory, rename).

    :raises OSError: it could not be written (the old file stays).
    """
    tmp = '%s.%d.tmp' % (path, os.getpid())
    try:
        with open(tmp, 'w', encoding='utf-8') as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.write('\n')
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class Keeper:
    """Reads and writes one optimizer's state in ``path`` ('' : never)."""

    def __init__(self, path: str, optimizer, nodes: int,
                 clock=time.monotonic):
        self.path = path
        self.optimizer = optimizer
        self.nodes = nodes
        self.clock = clock
        self.saved = None         # what the last save (or restore) held
        self.saved_at = None      # clock() of the last save
        self.failing = False      # the last write failed (warned once)

    def restore(self) -> bool:
        """Give the optimizer the state in the file; whether it did."""
        if not self.path:
            return False
        from nova_numa_overhead.compute import optimizer as opt_mod
        # Only what verdicts change from here on is written.
        self.saved = self._snapshot()
        try:
            data = load(self.path, opt_mod.TRUST_MIN)
        except StateError as exc:
            LOG.warning('Cost model state not restored, starting afresh: '
                        '%s', exc)
            return False
        if data is None:
            LOG.info('No cost model state in %s yet: the optimizer starts '
                     'with trust %.2f', self.path, self.optimizer.trust)
            return False
        if data['nodes'] != self.nodes:
            LOG.warning('Cost model state not restored, starting afresh: '
                        '%s was written on a host of %d NUMA nodes, this '
                        'one has %d', self.path, data['nodes'], self.nodes)
            return False
        self.optimizer.import_state(data)
        self.saved = self._snapshot()
        LOG.info('Cost model state restored from %s (saved %s): trust '
                 '%.2f, %d verdicts of moved guests', self.path,
                 data['saved_at'] or 'at an unknown time', data['trust'],
                 len(data['predictions']['guest']))
        return True

    def _snapshot(self) -> dict:
        state = self.optimizer.export_state()
        return {'trust': state['trust'],
                'predictions': {k: [list(p) for p in v]
                                for k, v in state['predictions'].items()}}

    def save(self, force: bool = False) -> bool:
        """Write the state when it changed since the last write, at most
        every SAVE_INTERVAL seconds (``force``: now, when it changed);
        whether it wrote.
        """
        if not self.path:
            return False
        now = self.clock()
        if not force and self.saved_at is not None and \
                now - self.saved_at < SAVE_INTERVAL:
            return False
        snapshot = self._snapshot()
        if snapshot == self.saved:
            return False
        data = dict(snapshot, version=VERSION, nodes=self.nodes,
                    saved_at=time.strftime('%Y-%m-%dT%H:%M:%SZ',
                                           time.gmtime()))
        self.saved_at = now
        try:
            save(self.path, data)
        except OSError as exc:
            if not self.failing:
                LOG.warning('Cost model state not saved (it stays in '
                            'memory; warned once until a save works): '
                            'cannot write %s: %s', self.path, exc)
            self.failing = True
            return False
        if self.failing:
            LOG.info('Cost model state saved to %s again', self.path)
        self.failing = False
        self.saved = snapshot
        return True
