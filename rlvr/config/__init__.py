"""Typed configuration, one module per section (run, data, domains, rollout, generation, trainer, algorithm,
cluster), the whole `Config` (root), loading with overrides (load), `--print-config` origins (origin) and the
generated reference docs/config.md (docs)."""
