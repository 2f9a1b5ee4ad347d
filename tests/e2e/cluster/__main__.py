"""python -m tests.e2e.cluster up|down|status|env [--provider local|kind]"""

from __future__ import annotations

import argparse
import sys

from .kind import KindCluster
from .local import LocalCluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.e2e.cluster", description=__doc__)
    parser.add_argument("command", choices=["up", "down", "status", "env"])
    parser.add_argument("--provider", choices=["local", "kind"], default="local",
                        help="local: built here from package registries (default); kind: a kind cluster of the same Kubernetes")
    args = parser.parse_args(argv)
    cluster = KindCluster() if args.provider == "kind" else LocalCluster()
    if args.command == "up":
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
