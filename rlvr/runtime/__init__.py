"""How the driver and the schedulers wait: the runtime (Ray or virtual time), deadlines, re-sends."""
