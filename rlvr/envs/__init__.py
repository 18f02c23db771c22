"""Multi-turn environments for agent training (rlvr/envs/base.py has the contract)."""
