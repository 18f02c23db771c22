"""A user group filter (rollout.filter.user_fn) that raises on step 1's groups: a run that crashes mid-way, from
user code inside a Ray worker, the way a bug in a user's filter would crash it."""

from __future__ import annotations


class InjectedCrash(RuntimeError):
    pass


def crash_from_step_1(group):
    if group.samples[0].policy_version >= 1:
        raise InjectedCrash(f"injected crash in the user filter at group {group.group_id}")
    return True
