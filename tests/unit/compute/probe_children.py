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
"""Stand-ins for the probe's measuring children, run by the fork server.

Kept apart from the tests: a fork server child imports the module of its
target, and this one imports nothing heavy.
"""

import errno
import os
import threading
import time


def answer(conn, value):
    """Answer at once."""
    conn.send(('ok', value))
    conn.close()


def fail_then_break(conn, barrier):
    """A stream whose binding fails: its cause first, then the barrier."""
    conn.send(('error', errno.EPERM, 'set_mempolicy refused'))
    conn.close()
    barrier.abort()


def wait_at(conn, barrier):
    """A stream waiting for the others, as before its first round."""
    try:
        barrier.wait()
        result = ('ok', 'passed')
    except threading.BrokenBarrierError:
        result = ('broken', None, 'another stream of the cell failed')
    conn.send(result)
    conn.close()


def die(conn, code):
    """Killed before answering (the OOM killer, say)."""
    os._exit(code)


def answer_then_hang(conn):
    """Answer with its pid, then do not exit (for a minute: long enough
    for the test, short enough not to hang a run where it is not killed).
    """
    conn.send(('ok', os.getpid()))
    conn.close()
    time.sleep(60)


def hang(conn):
    time.sleep(600)


def dispatch(conn, target, *args):
    """Each child its own stand-in (run_children gives all one target)."""
    target(conn, *args)
