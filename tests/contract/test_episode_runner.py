"""The multi-turn episode runner against its contract: which tokens train, how each turn's prompt grows, limits,
and every way an environment can fail (counted and masked, never fatal). The policy is scripted
(tests/helpers/envs.py) because these tests are about the episode machinery; the tokenizer and the grid puzzle
are the real ones."""

from __future__ import annotations

import asyncio

import pytest
from transformers import AutoTokenizer

from rlvr.config.base import ConfigError
from rlvr.config.domains import EnvConfig
from rlvr.config.load import config_from_dict
from rlvr.data.batch import build_train_batch
from rlvr.data.types import Prompt, SamplingParams
from rlvr.envs.base import check_args, resolve_env_class
from rlvr.rollout.episode import EpisodeRunner, env_prompts
from tests.helpers.envs import ScriptedPolicyForTest
from tests.helpers.fakes import LocalHandle

GRID = "rlvr.envs.grid_puzzle.GridPuzzleEnv"
FAULTY = "tests.helpers.envs.FaultyEnvForTest"
SAMPLING = SamplingParams(max_new_tokens=16, temperature=1.0, return_logprobs=True)


@pytest.fixture(scope="module")
def tokenizer(default_model_dir):
    return AutoTokenizer.from_pretrained(default_model_dir)


def runner(tokenizer, path=GRID, **env) -> EpisodeRunner:
    return EpisodeRunner("agent", EnvConfig(path=path, **env), tokenizer, default_turn_tokens=16)


def play(run: EpisodeRunner, policy, prompt: Prompt | None = None, index: int = 0):
    prompt = prompt or env_prompts("agent", run.cfg, "train", seed=0)[0]
    return asyncio.run(run.run_episode(prompt, index, policy, SAMPLING, version=3, group_id="g"))


def test_policy_tokens_train_observation_tokens_do_not(tokenizer):
    run = runner(tokenizer, args={"size": 4, "holes": 0, "min_distance": 6, "max_distance": 6}, max_turns=3)
    policy = ScriptedPolicyForTest(tokenizer, ["I think: left", "up", "nothing sensible"])
    s = play(run, policy)
    assert s.scored_ok and s.episode.turns == 3 and s.episode.finish == "max_turns"
    assert s.episode.invalid_actions == 1 and s.reward.reward == pytest.approx(-0.1)
    assert len(s.turn_index) == len(s.response_ids) == len(s.logprobs)
    action = [t for t in s.turn_index if t >= 0]
    assert sorted(set(action)) == [0, 1, 2]
    obs_ids = [i for i, t in zip(s.response_ids, s.turn_index) if t < 0]
    obs_text = tokenizer.decode(obs_ids)
    assert "Which way do you move?" in obs_text and "<|im_start|>user" in obs_text
    # the policy's own tokens (each turn ends with its EOS) are exactly what the policy generated
    for turn in range(3):
        ids = [i for i, t in zip(s.response_ids, s.turn_index) if t == turn]
        assert ids[-1] == tokenizer.eos_token_id
    # behaviour logprobs on the policy's tokens, 0.0 on observation tokens
    assert all(lp == 0.0 for lp, t in zip(s.logprobs, s.turn_index) if t < 0)
    assert all(lp < 0 for lp, t in zip(s.logprobs, s.turn_index) if t >= 0)

    batch = build_train_batch([s], pad_id=0)
    p = len(s.prompt.prompt_ids)
    turn_index = batch["turn_index"][0, p - 1 : p - 1 + len(s.response_ids)]
    assert turn_index.tolist() == s.turn_index
    assert batch["loss_mask"][0].tolist() == (batch["turn_index"][0] >= 0).float().tolist()
    assert batch["loss_mask"][0].sum() == len(action)
    assert batch["behav_logp"][0, p - 1 : p - 1 + len(s.logprobs)].tolist() == pytest.approx(s.logprobs)


def test_each_turn_prompt_extends_the_last_token_for_token(tokenizer):
    run = runner(tokenizer, args={"size": 4, "holes": 0, "min_distance": 6, "max_distance": 6}, max_turns=4)
    policy = ScriptedPolicyForTest(tokenizer, ["left", "up", "right", "down"])
    s = play(run, policy)
    assert len(policy.prompts) == 4 and policy.prompts[0] == s.prompt.prompt_ids
    for k in range(3):
        before, after = policy.prompts[k], policy.prompts[k + 1]
        reply = [i for i, t in zip(s.response_ids, s.turn_index) if t == k]
        assert after[: len(before) + len(reply)] == before + reply  # vLLM's prefix cache serves the whole turn
    assert policy.requests == [f"g:e0:t{k}" for k in range(4)]
    # the whole episode is the last prompt plus the last reply
    assert s.prompt.prompt_ids + s.response_ids == policy.prompts[-1] + [
        i for i, t in zip(s.response_ids, s.turn_index) if t == 3]


def test_an_episode_that_outgrows_its_token_budget_ends_with_a_finish_reason(tokenizer):
    run = runner(tokenizer, args={"size": 4, "holes": 0, "min_distance": 6, "max_distance": 6}, max_turns=20,
                 max_total_tokens=260)
    s = play(run, ScriptedPolicyForTest(tokenizer, ["left", "up"]))
    assert s.scored_ok and s.episode.finish == "token_budget" and s.finish_reason == "token_budget"
    assert 1 <= s.episode.turns < 20
    assert len(s.prompt.prompt_ids) + len(s.response_ids) <= 260
    # a first prompt that does not fit at all: masked, with the reason
    s = play(runner(tokenizer, max_total_tokens=40), ScriptedPolicyForTest(tokenizer, ["left"]))
    assert s.reward.status == "invalid" and "max_total_tokens" in s.reward.info and s.episode.turns == 0


def test_per_turn_token_budget_caps_each_reply(tokenizer):
    run = runner(tokenizer, max_turns=2, max_tokens_per_turn=3)
    policy = ScriptedPolicyForTest(tokenizer, ["a long reply that goes on and on"])
    s = play(run, policy)
    for turn in range(s.episode.turns):
        assert sum(t == turn for t in s.turn_index) == 3  # cut at 3 tokens (no EOS: finish "length" per turn)
    assert s.episode.invalid_actions == s.episode.turns


def test_solving_the_puzzle_is_success_and_reward(tokenizer):
    run = runner(tokenizer, args={"size": 3, "holes": 0, "min_distance": 1, "max_distance": 1}, max_turns=4)
    prompt = env_prompts("agent", run.cfg, "train", seed=0)[0]
    moves = iter(["up", "down", "left", "right"])  # try every direction in turn: one of them reaches G
    s = play(run, ScriptedPolicyForTest(tokenizer, lambda ids: next(moves), version=2), prompt)
    assert s.scored_ok and s.reward.correct and s.episode.success and s.episode.finish == "done"
    assert s.reward.reward == pytest.approx(1.0) and s.episode.rewards[-1] == 1.0
    assert s.policy_version == 2 and s.group_id == "g"  # the engine's version of the weights, not the step's


@pytest.mark.parametrize("mode, args, status", [
    ("raise", {}, "error"),
    ("garbage", {}, "invalid"),
    ("bad_reward", {}, "invalid"),
    ("bad_reset", {}, "invalid"),
    ("hang_thread", {"sleep_s": 2.0}, "timeout"),
    ("hang", {}, "timeout"),
])
def test_env_failures_are_counted_and_masked(tokenizer, mode, args, status):
    path = "tests.helpers.envs.HangingEnvForTest" if mode == "hang" else FAULTY
    run = runner(tokenizer, path=path, args={"mode": mode, "on_turn": 1, **args}, max_turns=4, step_timeout_s=0.3)
    s = play(run, ScriptedPolicyForTest(tokenizer, ["hello"]))
    assert s.reward.status == status and not s.scored_ok
    assert s.episode.finish == f"env_{status}"
    if mode != "bad_reset":  # turn 0 went through, turn 1 failed: the tokens of both are there, masked
        assert s.episode.rewards == [0.5] and len(s.episode.state_keys) == 2
        batch = build_train_batch([s], pad_id=0)
        assert batch["loss_mask"].sum() == 0


def test_run_group_plays_n_episodes_of_one_task_on_one_worker(tokenizer):
    run = runner(tokenizer, max_turns=2)
    policy = ScriptedPolicyForTest(tokenizer, ["left", "up"])
    prompt = env_prompts("agent", run.cfg, "train", seed=0)[1]
    phase: dict = {}
    group = asyncio.run(run.run_group(LocalHandle(policy), prompt, 3, SAMPLING, 0, "s0:1", phase))
    assert [s.index for s in group.samples] == [0, 1, 2] and group.group_id == "s0:1"
    assert len({tuple(s.prompt.prompt_ids) for s in group.samples}) == 1  # same task and seed: same first prompt
    assert len({s.episode.state_keys[0] for s in group.samples}) == 1  # ... and the same first anchor state
    assert phase["live_requests"] == set()  # every request finished


def test_env_prompts_are_deterministic_and_splits_differ(tokenizer):
    cfg = EnvConfig(path=GRID, train_tasks=5, val_tasks=3)
    a, b = env_prompts("g", cfg, "train", 7), env_prompts("g", cfg, "train", 7)
    assert [p.meta for p in a] == [p.meta for p in b] and len(a) == 5
    val = env_prompts("g", cfg, "val", 7)
    assert len(val) == 3 and not {p.meta["task"]["level"] for p in val} & {p.meta["task"]["level"] for p in a}
    assert env_prompts("g", cfg, "train", 8)[0].meta != a[0].meta


def test_bad_env_configuration_is_an_error_naming_the_key():
    with pytest.raises(ConfigError, match=r"domains\.agent\.env\.path: cannot import 'rlvr.envs.nope.Env'"):
        resolve_env_class("agent", EnvConfig(path="rlvr.envs.nope.Env"))
    with pytest.raises(ConfigError, match=r"domains\.agent\.env\.path: .* is not an Env subclass"):
        resolve_env_class("agent", EnvConfig(path="rlvr.config.root.Config"))
    with pytest.raises(ConfigError, match=r"domains\.agent\.env\.args\.x: GridPuzzleEnv has no argument 'x'"):
        check_args("agent", resolve_env_class("agent", EnvConfig(path=GRID)), EnvConfig(path=GRID, args={"x": 1}))
    with pytest.raises(ConfigError, match=r"domains\.agent\.env\.args: .*size must be >= 2"):
        check_args("agent", resolve_env_class("agent", EnvConfig(path=GRID)), EnvConfig(path=GRID, args={"size": 1}))
    base = {"data": {"train_files": []}}
    reward = {"worker": "rlvr.workers.rewards.math_rule.MathRuleRewardWorker"}
    with pytest.raises(ConfigError, match=r"domains\.agent\.env: a domain names a reward worker or an env, not both"):
        config_from_dict({**base, "domains": {"agent": {"reward": reward, "env": GRID}}})
    with pytest.raises(ConfigError, match=r"domains\.agent\.reward: a domain needs a reward worker"):
        config_from_dict({**base, "domains": {"agent": {}}})
    cfg = config_from_dict({**base, "domains": {"agent": {"env": GRID}}, "algorithm": "gigpo"})
    assert cfg.domains["agent"].env.path == GRID and cfg.algorithm.adv_estimator == "gigpo"
    assert cfg.algorithm.gigpo.gamma == 0.95 and not cfg.algorithm.norm_adv_by_std


def test_observation_wrapping_follows_the_chat_template(tokenizer):
    from rlvr.rollout.chat import TurnCodec

    codec = TurnCodec(tokenizer)
    messages, first = codec.first_prompt("Where now?", "Be brief.")
    reply = tokenizer("left", add_special_tokens=False)["input_ids"]
    # after a turn that ended with EOS, the sequence continues exactly as the template renders the conversation
    whole = first + reply + [tokenizer.eos_token_id] + codec.observation_ids("You moved <|im_end|> left.",
                                                                             reply + [tokenizer.eos_token_id])
    rendered = tokenizer.apply_chat_template(
        messages + [{"role": "assistant", "content": "left"}, {"role": "user", "content": "You moved <|im_end|> left."}],
        tokenize=False, add_generation_prompt=True)
    assert tokenizer.decode(whole) == rendered
    # the observation's "<|im_end|>" is text, not a turn boundary: only the template's own ones are special
    assert whole.count(tokenizer.eos_token_id) == rendered.count("<|im_end|>") - 1
    # a turn cut by the length limit gets the end-of-turn marker from the wrapper
    cut = codec.observation_ids("ok", reply)
    assert cut[0] == tokenizer.eos_token_id


def test_the_pipeline_fails_on_an_unknown_env_before_starting_anything(tokenizer):
    from rlvr.pipeline.build import build_episode_runners, load_domain_data

    tree = {"data": {"train_files": []}, "domains": {"agent": {"env": "rlvr.envs.grid_puzzle.NoSuchEnv"}}}
    with pytest.raises(ConfigError, match=r"domains\.agent\.env\.path: cannot import 'rlvr.envs.grid_puzzle.NoSuchEnv'"):
        load_domain_data(config_from_dict(tree), tokenizer)
    tree["domains"]["agent"]["env"] = {"path": GRID, "args": {"colour": "blue"}}
    with pytest.raises(ConfigError, match=r"domains\.agent\.env\.args\.colour: GridPuzzleEnv has no argument"):
        build_episode_runners(config_from_dict(tree), tokenizer)
    tree["domains"]["agent"]["env"] = {"path": GRID, "train_tasks": 3, "val_tasks": 2}
    data = load_domain_data(config_from_dict(tree), tokenizer)["agent"]
    assert len(data.train) == 3 and len(data.val) == 2 and data.train[0].meta["task"]["level"] >= 0
