"""A reference OpenStack Placement from the installed ``openstack-placement``,
on SQLite, for comparing Berth with it: ``python -m
bench.placement_reference DB_PATH [--threads]`` serves Placement's own WSGI app (built
by ``placement.deploy.loadapp`` as upstream's fixtures and WSGI entry point
build it, with noauth2) on 127.0.0.1 at a free port, and prints
``placement-reference: serving http://HOST:PORT/`` on stderr once it
listens; one request at a time (concurrent clients' connections queue),
or with ``--threads`` each in a thread of its own (on SQLite, concurrent
writes then fail on the database's lock). ``reference_server`` runs it as
a child process: Placement keeps its configuration and database engine in
process globals, so a process of its own is the clean way to start one,
as it is deployed."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from bench.placement_gabbits import child_server


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """One line per request on stderr would only be noise here."""


class _Server(WSGIServer):
    request_queue_size = 128  # concurrent clients' connections wait their turn, not dropped


class _ThreadingServer(ThreadingMixIn, _Server):
    daemon_threads = True


def _app(db_path: str) -> Any:
    from oslo_config import cfg
    from oslo_policy import opts as policy_opts
    from placement import conf as placement_conf
    from placement import db_api, deploy

    conf = cfg.ConfigOpts()
    placement_conf.register_opts(conf)
    policy_opts.set_defaults(conf)
    conf.set_default("connection", f"sqlite:///{db_path}", group="placement_database")
    conf([], default_config_files=[])
    conf.set_override("auth_strategy", "noauth2", group="api")
    conf.set_override("sync_on_startup", True, group="placement_database")
    db_api.configure(conf)
    return deploy.loadapp(conf)


def main() -> None:
    server_class = _ThreadingServer if "--threads" in sys.argv[2:] else _Server
    server = make_server(
        "127.0.0.1", 0, _app(sys.argv[1]), server_class=server_class, handler_class=_QuietHandler
    )
    print(f"placement-reference: serving http://127.0.0.1:{server.server_port}/", file=sys.stderr)
    sys.stderr.flush()
    server.serve_forever()


@contextmanager
def reference_server(db_path: Path, threads: bool = False) -> Iterator[tuple[str, int]]:
    """A reference Placement on a new SQLite database; where it listens."""
    command = [sys.executable, "-m", "bench.placement_reference", str(db_path)]
    if threads:
        command.append("--threads")
    with child_server(command, db_path.with_suffix(".stderr"), "placement-reference") as address:
        yield address


if __name__ == "__main__":
    main()
