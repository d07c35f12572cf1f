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
loop's verdicts, as the last verdict left it: ``learned_trust`` of
:class:`~nova_numa_overhead.compute.optimizer.Optimizer`) and the
(predicted, measured) pairs behind the calibration summary live in
memory: without this file a restarted agent (a configuration change, a
host reboot) trusts the model fully again, and on a host whose costs the
model misjudges makes again the larger moves its verdicts had made it
shy of. ``[numa_overhead_agent] state_file`` names the file. It holds
the trust as the last verdict that taught it left it and when
(``learned_at``): the trust's recovery after an hour without such a
verdict (the agent stopped or not) is worked out from them, and writes
nothing. The agent service reads it when it starts and writes it (a
temporary file in the same directory, then a rename: a crash leaves the
old file or the new one) at most every SAVE_INTERVAL seconds once a
verdict changed what it holds, and when it stops. ``status`` shows it.

The state is only for the model it was learned for: a file written by
another version of the plugin (whose cost model may predict otherwise),
for another host name, NUMA topology (node count, distances) or model
inputs (``topology_file``, the latency and bandwidth matrix in use, read
from it or from the hypervisor, and ``node_bandwidth_mbps``: a probe run
again into the same file is another matrix) starts the optimizer
afresh (an info line). No file is a first start. A file the agent cannot
parse or use is one warning line and a fresh start, and is renamed
``<file>.bad`` first (a newer version's file, or one to look at, is not
overwritten); one it cannot read or write is one warning line, and the
state stays in memory: the agent goes on in every case. To reset the
trust by hand: stop the agent, remove the file, start it.
"""

import calendar
import glob
import hashlib
import json
import math
import os
import re
import tempfile
import threading
import time

from oslo_log import log as logging

from nova_numa_overhead import version

LOG = logging.getLogger(__name__)

VERSION = 1
SAVE_INTERVAL = 60.0      # seconds between two writes at most
MAX_BYTES = 1 << 20       # a larger file is not read
MODE = 0o644              # status may run as another user
KINDS = ('guest', 'neighbours')
ISO = re.compile(r'^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$')
TIME_FORMAT = '%Y-%m-%dT%H:%M:%SZ'
# What the state was learned for: another value starts afresh.
FOR = {'plugin': 'plugin version', 'host': 'host name',
       'nodes': 'NUMA node count', 'distances': 'NUMA distances',
       'topology_file': 'topology_file',
       'matrix': 'latency and bandwidth matrix',
       'node_bandwidth_mbps': 'node_bandwidth_mbps'}


class StateError(ValueError):
    """A state file that cannot be used (one line, naming the file)."""


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + '...'


def _speed(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _pairs(path, kind, value) -> list:
    if not isinstance(value, list):
        raise StateError('%s: predictions.%s is not a list' % (path, kind))
    out = []
    for pair in value:
        speeds = [_speed(v) for v in pair] if isinstance(pair, list) and \
            len(pair) == 2 else [None]
        if None in speeds:
            raise StateError('%s: predictions.%s holds %s, not a pair of '
                             'speeds >= 0' % (path, kind, _short(pair)))
        out.append(tuple(speeds))
    return out


def validate(path, data, trust_min: float) -> dict:
    """``data`` read from ``path``, checked: {'version', 'trust',
    'saved_at', 'learned_at' (when a verdict last taught the trust; ''
    not known), 'predictions': {kind: [(predicted, measured), ...]},
    'learned_for': {...}}.

    :raises StateError: naming the file and what is wrong.
    """
    if not isinstance(data, dict):
        raise StateError('%s: not a JSON object' % path)
    if data.get('version') != VERSION:
        raise StateError('%s: version %s, not %d' % (
            path, _short(data.get('version')), VERSION))
    trust = _speed(data.get('trust'))
    if trust is None or not trust_min <= trust <= 1.0:
        raise StateError('%s: trust %s is not a number from %g to 1' % (
            path, _short(data.get('trust')), trust_min))
    times = {}
    for key in ('saved_at', 'learned_at'):
        value = data.get(key, '')
        if not isinstance(value, str) or value and (
                not ISO.match(value) or epoch(value) is None):
            raise StateError('%s: %s %s is not a UTC time '
                             '(YYYY-MM-DDThh:mm:ssZ)' % (
                                 path, key, _short(value)))
        times[key] = value
    learned_for = data.get('learned_for')
    if not isinstance(learned_for, dict):
        raise StateError('%s: learned_for is not a JSON object' % path)
    predictions = data.get('predictions')
    if not isinstance(predictions, dict) or \
            set(predictions) != set(KINDS):
        raise StateError('%s: predictions must hold exactly %s' % (
            path, ' and '.join(KINDS)))
    return {'version': VERSION, 'trust': trust,
            'saved_at': times['saved_at'],
            'learned_at': times['learned_at'],
            'learned_for': learned_for,
            'predictions': {kind: _pairs(path, kind, predictions[kind])
                            for kind in KINDS}}


def load(path, trust_min: float) -> dict | None:
    """The state in ``path`` (:func:`validate`), None when there is no
    such file.

    :raises OSError: it cannot be read (or is not a file).
    :raises StateError: it cannot be used.
    """
    try:
        with open(path, 'rb') as f:
            raw = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    if len(raw) > MAX_BYTES:
        raise StateError('%s: larger than %d bytes' % (path, MAX_BYTES))
    try:
        data = json.loads(raw.decode('utf-8'))
    except (ValueError, RecursionError) as exc:
        raise StateError('%s: not JSON: %s' % (path, _short(str(exc))))
    return validate(path, data, trust_min)


def save(path, data: dict) -> None:
    """Write ``data`` to ``path`` atomically: a new temporary file in the
    same directory (O_EXCL: never another's), then a rename.

    :raises OSError: it could not be written (the old file stays).
    """
    directory, name = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=name + '.', suffix='.tmp',
                               dir=directory)
    try:
        with os.fdopen(fd, 'w', encoding='utf-8') as f:
            json.dump(data, f, indent=1, sort_keys=True, allow_nan=False)
            f.write('\n')
            f.flush()
            os.fchmod(f.fileno(), MODE)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def epoch(when: str) -> float | None:
    """A state's UTC time as seconds since the epoch (None: '' or not
    a time).
    """
    if not when:
        return None
    try:
        return float(calendar.timegm(time.strptime(when, TIME_FORMAT)))
    except (ValueError, OverflowError):
        return None


def utc(seconds: float | None) -> str:
    """Seconds since the epoch as a state's UTC time ('' for None)."""
    if seconds is None:
        return ''
    return time.strftime(TIME_FORMAT, time.gmtime(seconds))


def age(when: str) -> float:
    """Seconds since ``when`` (a state's UTC time; '', not a time or
    in the future: 0).
    """
    then = epoch(when)
    return 0.0 if then is None else max(time.time() - then, 0.0)


def taught(data: dict) -> str:
    """When a verdict last taught the saved trust: ``learned_at``, or
    for want of it ``saved_at``.
    """
    return data.get('learned_at') or data.get('saved_at') or ''


def differs(data: dict, learned_for: dict) -> list:
    """The keys of FOR whose saved value is not this host's now."""
    saved = data.get('learned_for') or {}
    return [k for k in FOR if saved.get(k) != learned_for.get(k)]


def learned_for(conf, host: str, topology, matrix=None) -> dict:
    """What a state is learned for on this host now (FOR); ``matrix``
    is the estimator's topology (the measured matrix in use), if any.
    """
    opts = conf.numa_overhead_agent
    return {'plugin': version.version_string(), 'host': host,
            'nodes': topology.size,
            'distances': [list(row) for row in topology.distances],
            'topology_file': opts.topology_file or '',
            'matrix': matrix_digest(matrix),
            'node_bandwidth_mbps': opts.node_bandwidth_mbps}


def matrix_digest(matrix) -> str:
    """A short digest of the measured latency and bandwidth matrix of
    an estimator topology ('' : none, SLIT answers).
    """
    parts = [getattr(matrix, key, None) for key in (
        'latency_ns', 'bandwidth_mbps', 'bandwidth_streams')]
    if not any(parts):
        return ''
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Keeper:
    """Reads and writes one optimizer's state in ``path`` ('' : never),
    learned for ``learned_for`` (:func:`learned_for`).
    """

    def __init__(self, path: str, optimizer, learned_for: dict,
                 clock=time.monotonic):
        self.path = path
        self.optimizer = optimizer
        self.learned_for = learned_for
        self.clock = clock
        self.saved = None         # what the last save (or restore) held
        # clock() of the last look at what changed (a save or not):
        # the agent calls save() every cycle, the state is compared at
        # most every SAVE_INTERVAL seconds.
        self.checked_at = None
        self.failing = False      # the last write failed (warned once)
        self.lock = threading.Lock()

    def restore(self) -> bool:
        """Give the optimizer the state in the file; whether it did."""
        if not self.path:
            return False
        from nova_numa_overhead.compute import optimizer as opt_mod
        # Only what verdicts change from here on is written.
        self.saved = self._snapshot()
        self._remove_leftovers()
        try:
            data = load(self.path, opt_mod.TRUST_MIN)
        except StateError as exc:
            self._set_aside(exc)
            return False
        except OSError as exc:
            LOG.warning('Cost model state not restored, starting afresh: '
                        'cannot read %s: %s', self.path, exc)
            return False
        if data is None:
            LOG.info('No cost model state in %s yet: the optimizer starts '
                     'with trust %.2f', self.path, self.optimizer.trust)
            return False
        changed = differs(data, self.learned_for)
        if changed:
            LOG.info('Cost model state in %s not restored, starting '
                     'afresh: it was learned for another %s', self.path,
                     ', '.join(FOR[k] for k in changed))
            return False
        when = taught(data)
        self.optimizer.import_state(data, idle=age(when),
                                    learned_at=epoch(when))
        self.saved = self._snapshot()
        trust = self.optimizer.trust
        LOG.info('Cost model state restored from %s (saved %s): trust '
                 '%.2f%s, predictions of %d moved guests', self.path,
                 data['saved_at'] or 'at an unknown time', trust,
                 '' if round(trust, 2) == round(data['trust'], 2) else
                 ' (%.2f saved, recovered since %s)' % (
                     data['trust'], when),
                 len(self.optimizer.predictions['guest']))
        return True

    def _set_aside(self, exc) -> None:
        bad = self.path + '.bad'
        try:
            os.replace(self.path, bad)
            kept = 'set aside as %s' % bad
        except OSError as err:
            kept = 'not set aside (%s)' % err
        LOG.warning('Cost model state not restored, starting afresh: %s '
                    '(%s)', exc, kept)

    def _remove_leftovers(self) -> None:
        """Temporary files a crash during a save left behind."""
        directory, name = os.path.split(os.path.abspath(self.path))
        for tmp in glob.glob(os.path.join(glob.escape(directory),
                                          glob.escape(name) + '.*.tmp')):
            try:
                os.unlink(tmp)
            except OSError:
                pass

    def _snapshot(self) -> dict:
        state = self.optimizer.export_state()
        # Only pairs load() accepts: one infinite or negative speed would
        # have the whole file refused at the next start.
        return {'trust': state['trust'],
                'learned_at': utc(state.get('learned_at')),
                'predictions': {k: [list(p) for p in v if len(p) == 2 and
                                    None not in map(_speed, p)]
                                for k, v in state['predictions'].items()}}

    def save(self, force: bool = False) -> bool:
        """Write the state when it changed since the last write, at most
        every SAVE_INTERVAL seconds (``force``: now, when it changed);
        whether it wrote.
        """
        if not self.path:
            return False
        with self.lock:
            return self._save(force)

    def _save(self, force) -> bool:
        now = self.clock()
        if not force and self.checked_at is not None and \
                now - self.checked_at < SAVE_INTERVAL:
            return False
        self.checked_at = now
        snapshot = self._snapshot()
        if snapshot == self.saved:
            return False
        data = dict(snapshot, version=VERSION,
                    learned_for=self.learned_for,
                    saved_at=utc(time.time()))
        try:
            save(self.path, data)
        except (OSError, ValueError) as exc:
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
