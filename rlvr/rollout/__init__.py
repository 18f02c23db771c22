"""Multi-turn rollouts: one episode of a policy acting in an environment through actor_infer."""
