"""Examples that plug into rlvr; importable as `examples.*` when run from the repository root."""
