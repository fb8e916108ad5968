"""``python -m freshet.controller --node-id 1 --voters 1@127.0.0.1:9101,2@127.0.0.1:9102,3@127.0.0.1:9103
--listen 127.0.0.1:9201 [--data-dir DIR] [--password-file FILE]``: one controller node, running until SIGTERM
or SIGINT. ``--password-file`` (or the file named by $FRESHET_CONTROLLER_PASSWORD_FILE): the cluster secret that
encrypts and authenticates the Raft traffic between the controllers, the same on every one."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from .auth import PASSWORD_FILE_ENV, read_password_file
from .node import DEFAULT_SESSION_TIMEOUT_MS, Controller, parse_voters
from .placement import (DEFAULT_LEADER_IMBALANCE_CHECK_INTERVAL_S, DEFAULT_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE,
                        LeaderBalance)


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m freshet.controller", description=__doc__)
    parser.add_argument("--node-id", type=int, required=True)
    parser.add_argument("--voters", required=True, help="ID@HOST:PORT,... every controller's Raft address")
    parser.add_argument("--listen", type=_address, required=True, help="HOST:PORT of the JSON endpoint")
    parser.add_argument("--data-dir", help="where the Raft journal and snapshots are kept (memory only if none)")
    parser.add_argument("--session-timeout-ms", type=int, default=DEFAULT_SESSION_TIMEOUT_MS)
    parser.add_argument("--auto-leader-rebalance-enable", choices=("true", "false"), default="true",
                        help="auto.leader.rebalance.enable: give leaderships back to preferred replicas")
    parser.add_argument("--leader-imbalance-check-interval-seconds", type=float,
                        default=DEFAULT_LEADER_IMBALANCE_CHECK_INTERVAL_S)
    parser.add_argument("--leader-imbalance-per-broker-percentage", type=int,
                        default=DEFAULT_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE)
    parser.add_argument("--password-file", default=os.environ.get(PASSWORD_FILE_ENV) or None,
                        help="a file whose first line is the cluster secret (16 characters or more), the same "
                             "for every controller: Raft traffic encrypted and authenticated "
                             f"(default: ${PASSWORD_FILE_ENV})")
    parser.add_argument("--endpoint-auth", action="store_true",
                        help="clients of the JSON endpoint (brokers, freshet cluster) prove the cluster secret first: "
                             f"give them the file in ${PASSWORD_FILE_ENV}")
    args = parser.parse_args(argv)
    try:
        password = read_password_file(args.password_file) if args.password_file else None
        voters = parse_voters(args.voters)
        balance = LeaderBalance(args.auto_leader_rebalance_enable == "true",
                                args.leader_imbalance_check_interval_seconds,
                                args.leader_imbalance_per_broker_percentage)
        controller = Controller(
            args.node_id, voters, listen=args.listen, data_dir=args.data_dir,
            session_timeout_ms=args.session_timeout_ms, leader_balance=balance, password=password,
            endpoint_auth=args.endpoint_auth,
        )
        controller.start()
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    host, port = controller.endpoint
    print(f"controller {args.node_id} listening on {host}:{port}", flush=True)
    stop.wait()
    controller.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
