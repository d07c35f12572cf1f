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
"""What the console scripts share: argument types, one-line errors, a
quick check that a message broker answers, and quiet imports.

Every command reports a failure as one line on standard error, prefixed
with its name, and a non-zero exit code: 1 when something it talks to
failed (libvirt, the broker, a file), 2 for bad arguments or
configuration (argparse's own code).
"""

import argparse
import contextlib
import errno
import os
import socket
import sys
import urllib.parse
import warnings

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

#: Seconds a command waits for the broker before saying it cannot reach it.
BROKER_TIMEOUT = 5.0


class ArgumentParser(argparse.ArgumentParser):
    """argparse, with its errors on one line (usage stays in --help)."""

    def error(self, message):
        self.exit(EXIT_USAGE, '%s: %s (see %s --help)\n'
                  % (self.prog, one_line(message), self.prog))


class CommandError(Exception):
    """A failure to report as one line (and exit code ``code``)."""

    def __init__(self, message, code=EXIT_ERROR):
        super().__init__(message)
        self.code = code


def one_line(message) -> str:
    """``message`` on one line, whitespace collapsed."""
    return ' '.join(str(message).split())


def fail(prog: str, message, code: int = EXIT_ERROR) -> int:
    """Print ``prog: message`` on one line to stderr; return ``code``."""
    print('%s: %s' % (prog, one_line(message)), file=sys.stderr)
    return code


def bounded_int(low: int, high: int | None = None):
    """An argparse type: an integer from ``low`` to ``high``."""
    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError('%r is not an integer' % text)
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(
                'must be an integer from %d to %d, not %d'
                % (low, high, value) if high is not None else
                'must be an integer >= %d, not %d' % (low, value))
        return value
    convert.__name__ = 'integer'
    return convert


def seconds(high: float | None = None, low: float = 0.0):
    """An argparse type: a number of seconds from ``low`` to ``high``."""
    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError('%r is not a number' % text)
        too_big = high is not None and value > high
        if not low <= value < float('inf') or too_big:
            raise argparse.ArgumentTypeError(
                'must be a number of seconds from %g to %g, not %s'
                % (low, high, text) if high is not None else
                'must be a number of seconds >= %g, not %s' % (low, text))
        return value
    convert.__name__ = 'seconds'
    return convert


def quiet_eventlet() -> None:
    """Hide eventlet's deprecation warning.

    Nova depends on eventlet and futurist imports it when it is there;
    the plugin's commands and agent never use it (threading backend), so
    its warning at every start is noise to an operator.
    """
    warnings.filterwarnings('ignore', message=r'\s*Eventlet is deprecated',
                            category=Warning)


@contextlib.contextmanager
def broken_pipe_is_quiet():
    """Stop quietly when the reader of stdout goes away (``| head``)."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        # Python would complain again when it flushes stdout at exit.
        try:
            devnull = open('/dev/null', 'w')
            sys.stdout = devnull
        except OSError:
            pass


def check_figure(path: str) -> None:
    """Fail now, not after a long run, if the figure cannot be drawn.

    :raises CommandError: matplotlib missing, a format it cannot write,
        or a directory that does not exist.
    """
    try:
        import matplotlib
        matplotlib.use('Agg')
        from matplotlib.backends import backend_agg
    except ImportError:
        raise CommandError("drawing %s needs matplotlib: pip install "
                           "'nova-numa-overhead[sim]'" % path)
    extension = os.path.splitext(path)[1][1:].lower()
    formats = backend_agg.FigureCanvasAgg.get_supported_filetypes()
    if extension not in formats:
        raise CommandError('cannot draw %s: the file name must end in one '
                           'of .%s' % (path, ', .'.join(sorted(formats))),
                           EXIT_USAGE)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise CommandError('cannot draw %s: directory %s does not exist'
                           % (path, directory), EXIT_USAGE)


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***``."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return '<unparsable URL>'
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(':%s@' % parts.password, ':***@')
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


# [oslo_messaging_rabbit] ssl_version as oslo.messaging's rabbit driver
# reads it (lower-cased), and the ssl module's protocol it stands for.
_SSL_VERSIONS = {'tlsv1': 'PROTOCOL_TLSv1', 'sslv23': 'PROTOCOL_SSLv23',
                 'sslv2': 'PROTOCOL_SSLv2', 'sslv3': 'PROTOCOL_SSLv3',
                 'tlsv1_1': 'PROTOCOL_TLSv1_1',
                 'tlsv1_2': 'PROTOCOL_TLSv1_2'}


def _rabbit_ssl(conf, parsed, url: str):
    """The ``ssl`` argument oslo.messaging's rabbit driver would give
    kombu, which hands it to py-amqp as is: False, True or a dict of TLS
    options (``server_hostname`` left out: it depends on the host).

    Its ``[oslo_messaging_rabbit]`` options (when registered on ``conf``:
    the driver registers them when it loads) with the URL's query over
    them (``?ssl=1&ssl_ca_file=...``), as the driver reads them.

    :raises CommandError: a bad value, or a TLS file it cannot read.
    """
    import ssl

    from oslo_config import cfg
    from oslo_config import types

    def option(name, default):
        if name in parsed.query:
            value = parsed.query[name]
            try:
                return types.Boolean()(value) if name == 'ssl' else value
            except ValueError as exc:
                raise CommandError('bad transport URL %s: %s: %s'
                                   % (redact(url), name, exc), EXIT_USAGE)
        try:
            return conf.oslo_messaging_rabbit[name]
        except (cfg.NoSuchOptError, cfg.NoSuchGroupError):
            return default
        except ValueError as exc:
            raise CommandError('configuration error: [oslo_messaging_rabbit]'
                               ' %s: %s' % (name, exc), EXIT_USAGE)

    if not option('ssl', False):
        return False
    params = {}
    version = option('ssl_version', '')
    if version:
        protocol = getattr(ssl, _SSL_VERSIONS.get(version.lower(), ''), None)
        if protocol is None:
            raise CommandError('configuration error: [oslo_messaging_rabbit]'
                               ' ssl_version: %r is not one of %s'
                               % (version, ', '.join(sorted(_SSL_VERSIONS))),
                               EXIT_USAGE)
        params['ssl_version'] = protocol
    for key, name in (('keyfile', 'ssl_key_file'),
                      ('certfile', 'ssl_cert_file'),
                      ('ca_certs', 'ssl_ca_file')):
        path = option(name, '')
        if not path:
            continue
        # ssl's own error would not name the file.
        if not os.access(path, os.R_OK):
            raise CommandError('configuration error: [oslo_messaging_rabbit]'
                               ' %s: cannot read %s' % (name, path),
                               EXIT_USAGE)
        params[key] = path
    if 'ca_certs' in params:
        params['cert_reqs'] = ssl.CERT_REQUIRED
    return params or True


def check_broker(url: str | None, timeout: float = BROKER_TIMEOUT,
                 conf=None) -> None:
    """Fail fast when the broker of ``url`` does not answer or refuses us.

    oslo.messaging retries a broker that is down forever, and reports bad
    credentials from a background thread: a command would hang or print a
    traceback. Only ``rabbit://`` URLs are checked (AMQP login with the
    URL's credentials and virtual host, over TLS as oslo.messaging would
    connect: ``ssl`` in the URL's query or in ``[oslo_messaging_rabbit]``
    of ``conf``, the global ``cfg.CONF`` by default); any other URL
    passes.

    :raises CommandError: naming the URL (password hidden) and the reason.
    """
    if not url:
        return
    from oslo_config import cfg
    import oslo_messaging as messaging
    conf = cfg.CONF if conf is None else conf
    try:
        parsed = messaging.TransportURL.parse(conf, url)
    except (messaging.InvalidTransportURL, ValueError) as exc:
        raise CommandError('bad transport URL %s: %s' % (redact(url), exc),
                           EXIT_USAGE)
    if parsed.transport not in ('rabbit', 'amqp'):
        return
    import amqp
    tls = _rabbit_ssl(conf, parsed, url)
    vhost = parsed.virtual_host or '/'
    errors = []
    for host in parsed.hosts or [messaging.TransportHost()]:
        user = host.username or 'guest'
        where = '%s:%d' % (host.hostname or 'localhost', host.port or 5672)
        ssl_arg = tls
        if isinstance(tls, dict) and 'ca_certs' in tls:
            # As the driver: with a CA, the broker's name is checked.
            ssl_arg = dict(tls, server_hostname=host.hostname or 'localhost')
        conn = amqp.Connection(
            where, userid=user, password=host.password or 'guest',
            virtual_host=vhost, connect_timeout=timeout,
            read_timeout=timeout, write_timeout=timeout, ssl=ssl_arg)
        try:
            conn.connect()
            return
        except amqp.exceptions.AccessRefused:
            errors.append('%s refused the login of user %r' % (where, user))
        except amqp.exceptions.NotAllowed:
            errors.append('%s: user %r may not use virtual host %r'
                          % (where, user, vhost))
        except (OSError, amqp.exceptions.AMQPError) as exc:
            if isinstance(exc, socket.timeout) or \
                    getattr(exc, 'errno', None) == errno.ETIMEDOUT:
                reason = 'no answer within %g s' % timeout
            else:
                reason = (getattr(exc, 'strerror', None) or str(exc) or
                          type(exc).__name__)
            errors.append('%s: %s' % (where, reason))
        finally:
            with contextlib.suppress(Exception):
                conn.collect()
    raise CommandError('cannot reach the broker at %s: %s'
                       % (redact(url), '; '.join(errors)))
