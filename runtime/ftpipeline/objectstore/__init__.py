"""Object storage: checkpoints and output at s3:// URIs or in a local directory, behind one protocol."""
