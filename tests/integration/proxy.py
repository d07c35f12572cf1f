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
"""A TCP proxy a test controls, to take a shared broker "down" for one
client without touching the broker: client -> proxy -> broker.

:meth:`TcpProxy.cut` closes every connection and refuses new ones (what
a stopped broker looks like); :meth:`TcpProxy.restore` lets them in again.
"""

import selectors
import socket
import threading


class TcpProxy:
    """Forwards 127.0.0.1:<port> to ``target`` until cut."""

    def __init__(self, target=('127.0.0.1', 5672)):
        self.target = target
        self._lock = threading.Lock()
        self._pairs = []
        self._listener = None
        self._stopped = False
        # Keep the port across cut/restore: clients reconnect to it.
        probe = socket.socket()
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(('127.0.0.1', 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self.restore()

    @property
    def url_host(self) -> str:
        return '127.0.0.1:%d' % self.port

    def restore(self) -> None:
        """Accept and forward connections (again)."""
        with self._lock:
            if self._listener is not None or self._stopped:
                return
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(('127.0.0.1', self.port))
            listener.listen(64)
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,),
                         name='proxy-accept', daemon=True).start()

    def cut(self) -> None:
        """Close every connection and refuse new ones."""
        with self._lock:
            listener, self._listener = self._listener, None
            pairs, self._pairs = self._pairs, []
        if listener is not None:
            _close(listener)
        for pair in pairs:
            for sock in pair:
                _close(sock)

    def stop(self) -> None:
        self._stopped = True
        self.cut()

    def _accept(self, listener) -> None:
        while True:
            try:
                client, _addr = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                if self._listener is not listener:
                    _close(client)
                    _close(upstream)
                    return
                self._pairs.append((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream),
                             name='proxy-pump', daemon=True).start()

    def _pump(self, client, upstream) -> None:
        peers = {client: upstream, upstream: client}
        selector = selectors.DefaultSelector()
        try:
            for sock in peers:
                selector.register(sock, selectors.EVENT_READ)
            while True:
                for key, _events in selector.select(timeout=1):
                    data = key.fileobj.recv(65536)
                    if not data:
                        return
                    peers[key.fileobj].sendall(data)
        except (OSError, ValueError):
            return
        finally:
            selector.close()
            for sock in peers:
                _close(sock)


def _close(sock) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
