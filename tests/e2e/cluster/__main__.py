"""python -m tests.e2e.cluster up|down|status|env [--provider local|kind] [--nodes N]
   python -m tests.e2e.cluster node stop|start NAME   (the local provider's pool nodes)
   python -m tests.e2e.cluster build   (the Debian packages and Go binaries alone, for the cache: it needs only
                                        the standard library, so CI runs it while the virtualenv is installed)"""

from __future__ import annotations

import argparse
import sys

from . import build
from .config import Paths
from .kind import KindCluster
from .local import LocalCluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.e2e.cluster", description=__doc__)
    parser.add_argument("command", choices=["up", "down", "status", "env", "node", "build"])
    parser.add_argument("args", nargs="*", help="node: stop|start NAME")
    parser.add_argument("--nodes", type=int, default=None,
                        help="local: nodes in all, the first plus a pool of the others (up; default 1)")
    parser.add_argument("--provider", choices=["local", "kind"], default="local",
                        help="local: built here from package registries (default); kind: a kind cluster of the same Kubernetes")
    args = parser.parse_args(argv)
    if args.command == "build":
        build.ensure_apt()
        build.ensure_go_binaries(Paths.from_env())
        return 0
    cluster = KindCluster() if args.provider == "kind" else LocalCluster(nodes=args.nodes)
    if args.command == "node":
        if not isinstance(cluster, LocalCluster) or len(args.args) != 2 or args.args[0] not in ("stop", "start"):
            parser.error("node stop|start NAME, on the local provider")
        action, name = args.args
        (cluster.stop_node if action == "stop" else cluster.start_node)(name)
    elif args.command == "up":
        cluster.up()
    elif args.command == "down":
        cluster.down()
        if isinstance(cluster, LocalCluster):
            left = cluster.leftovers()
            if left:
                print("left behind:\n  " + "\n  ".join(left), file=sys.stderr)
                return 1
    elif args.command == "status":
        print(cluster.status())
    else:
        print(cluster.env())
    return 0


if __name__ == "__main__":
    sys.exit(main())
