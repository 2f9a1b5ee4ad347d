"""Checkpoints: consistent cuts of a running pipeline, and recovery from them.

``clock.py`` (vector clocks and epochs), ``tracker.py`` (when a checkpoint is
complete), ``storage.py`` (snapshot files and manifests), ``pointer.py`` (the
committed checkpoint in ZooKeeper), ``restore.py`` (what to run to bring a
restored pipeline back to its cut).
"""
