"""The command log: coordination decisions in ZooKeeper, cluster state as a fold of them (Onyx)."""
