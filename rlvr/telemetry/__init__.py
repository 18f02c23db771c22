"""The run's telemetry: trackers (JSONL, TensorBoard, W&B), system and overlap metrics, and the quiet console
that routes every process's output to the run's logs (installed by the CLI)."""
