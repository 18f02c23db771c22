"""rlvr: multi-domain reinforcement learning with verifiable rewards, on Ray."""

__version__ = "0.1.0"
