"""rsl_rl's OnPolicyRunner trains mjlab tasks through ``to_rsl_rl(gpu_envs.wrap(env))``.

The path a robotics user takes end to end: mjlab's own task, mjlab's own PPO config for
it (``load_rl_cfg``, turned into rsl_rl's dict the way mjlab's train script does),
rsl_rl's ``OnPolicyRunner`` from the rsl-rl-lib version mjlab pins, and gpu_envs in
between instead of mjlab's ``RslRlVecEnvWrapper``: exact final observations, mjlab's own
episode clock (``init_at_random_ep_len`` writes it), ``extras["log"]``, and time-outs
bootstrapped from the critic's value of the TRUE final observation
(``vec.bootstrap_from(runner)``).

What a few CPU minutes can show (MuJoCo Warp's CPU kernels: a Go1 step costs about
13 ms of CPU per env, a cartpole step far less):

* ``test_on_policy_runner_trains_the_cartpole`` (the tier's training run, about one CPU
  minute): 32 envs, 20 iterations of mjlab's 32-step rollouts, 5 s episodes so that
  time-outs, and their bootstrapping from true final observations, happen throughout.
  Measured here: reward per step 0.014 -> 0.020 (iterations 1-5 vs the last 5), value
  loss 0.026 -> 0.010, action noise 1.0 -> 0.66, ~200 time-outs.
* ``test_on_policy_runner_trains_go1`` (Unitree Go1, flat velocity; about 4.5 CPU
  minutes, the tier's longest test):
  16 envs, 30 iterations of 16 x 24 steps, some 12k samples where mjlab trains with
  4096 envs and ~100k samples per iteration. Velocity tracking does not improve
  measurably at that scale, so it asserts what this budget does produce and broken
  transitions would stop: the critic learns to predict the returns (its loss falls
  under 0.6 of its early level) and the action noise shrinks (noisy joint targets cost
  the action-rate penalty and make the robot fall). At 16 iterations neither is
  measurable yet (value loss flat, noise 0.999 -> 0.988).
"""

from __future__ import annotations

import contextlib
import io
import sys
from dataclasses import asdict

import pytest
import torch

import gpu_envs
from gpu_envs.interop import to_rsl_rl
from tests.mjlab.tasks import CARTPOLE, GO1, GO1_CRITIC, raw_env, task_cfg

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning"),
]


def mjlab_train_cfg(task_id: str) -> dict:
    """mjlab's registered PPO config of ``task_id`` as rsl_rl's dict (what ``mjlab/scripts/train.py`` passes)."""
    from mjlab.tasks.registry import load_rl_cfg

    cfg = asdict(load_rl_cfg(task_id))
    for model in ("actor", "critic"):  # MjlabOnPolicyRunner strips the optional entries left None
        for option in ("cnn_cfg", "distribution_cfg"):
            if cfg[model].get(option) is None:
                cfg[model].pop(option, None)
        if cfg[model].get("rnn_type") is None:
            for option in ("rnn_type", "rnn_hidden_dim", "rnn_num_layers"):
                cfg[model].pop(option, None)
    cfg["logger"] = "tensorboard"  # no writer without a log_dir; never wandb in a test
    return cfg


class Training:
    """An OnPolicyRunner on ``to_rsl_rl(env)``, recording what each step hands rsl_rl and each update's losses."""

    def __init__(self, env, task_id: str, bootstrap: bool) -> None:
        from rsl_rl.runners import OnPolicyRunner

        self.env = env
        self.rewards: list[float] = []  # mean reward of each step's transitions
        self.ends: list[int] = []
        self.time_outs: list[int] = []
        self.placeholders: list[bool] = []
        self.value_loss: list[float] = []
        self.noise: list[float] = []
        step_and_maybe_reset = env.step_and_maybe_reset

        def recording(td):  # what the training data holds, step by step
            td, root = step_and_maybe_reset(td)
            nxt = td["next"]
            self.rewards.append(float(nxt["reward"].mean()))
            self.ends.append(int(nxt["done"].sum()))
            self.time_outs.append(int(nxt["truncated"].sum()))
            self.placeholders.append(bool(nxt["final_obs_missing"].any()))
            return td, root

        env.step_and_maybe_reset = recording
        with contextlib.redirect_stdout(io.StringIO()):
            self.vec = to_rsl_rl(env)
            torch.manual_seed(0)
            self.runner = OnPolicyRunner(self.vec, mjlab_train_cfg(task_id), log_dir=None, device="cpu")
            if bootstrap:
                self.vec.bootstrap_from(self.runner)  # time-outs bootstrapped from V(true final observation)
        update = self.runner.alg.update

        def recording_update():
            losses = update()
            self.value_loss.append(float(losses["value"]))
            self.noise.append(float(self.runner.alg.get_policy().output_std.detach().mean()))
            return losses

        self.runner.alg.update = recording_update

    def learn(self, iterations: int) -> None:
        self.rewards.clear(), self.ends.clear(), self.time_outs.clear(), self.placeholders.clear()
        with contextlib.redirect_stdout(io.StringIO()):
            self.runner.learn(num_learning_iterations=iterations, init_at_random_ep_len=True)

    def reward_per_iteration(self) -> list[float]:
        steps = self.runner.cfg["num_steps_per_env"]
        return [sum(self.rewards[i : i + steps]) / steps for i in range(0, len(self.rewards), steps)]


def test_on_policy_runner_trains_the_cartpole(one_thread):
    num_envs, iterations = 32, 20
    env = gpu_envs.wrap(raw_env(task_cfg(CARTPOLE, num_envs, episode_length_s=5.0)))
    training = Training(env, CARTPOLE, bootstrap=True)
    training.learn(iterations)
    env.close()
    rewards, value_loss, noise = training.reward_per_iteration(), training.value_loss, training.noise
    print(
        f"\n[mjlab] cartpole, {num_envs} envs, {iterations} PPO iterations through to_rsl_rl: reward per step "
        f"{[round(r, 4) for r in rewards]}, value loss {[round(v, 4) for v in value_loss]}, action std "
        f"{noise[0]:.3f} -> {noise[-1]:.3f}, {sum(training.time_outs)} time-outs",
        file=sys.stderr,
    )

    steps = training.runner.cfg["num_steps_per_env"]
    assert len(training.placeholders) == iterations * steps and not any(training.placeholders)
    assert sum(training.time_outs) >= num_envs, training.time_outs  # bootstrapped from true final observations
    # iteration 0 starts every pole upright (the reset range): the policy's progress is measured from iteration 1
    early, late = sum(rewards[1:6]) / 5, sum(rewards[-5:]) / 5
    assert late > 1.2 * early, rewards
    assert sum(value_loss[-5:]) / 5 < 0.7 * sum(value_loss[:3]) / 3, value_loss
    assert noise[-1] < 0.85, noise


def evaluate(vec, policy, steps: int = 50) -> dict[str, float]:
    """The deterministic Go1 policy for ``steps`` steps from a fresh reset: reward, falls, velocity-tracking error."""
    with contextlib.redirect_stdout(io.StringIO()):
        obs, _ = vec.reset()
    reward = error = 0.0
    falls = 0
    with torch.inference_mode():
        for _ in range(steps):
            with contextlib.redirect_stdout(io.StringIO()):
                obs, rewards, dones, extras = vec.step(policy(obs))
            critic = obs["critic"]
            velocity, command = critic[:, GO1_CRITIC["base_lin_vel"]][:, :2], critic[:, GO1_CRITIC["command"]][:, :2]
            reward += float(rewards.mean()) / steps
            error += float((velocity - command).norm(dim=-1).mean()) / steps
            falls += int((dones.bool() & ~extras["time_outs"]).sum())
    return {"reward per step": round(reward, 4), "falls": falls, "velocity error m/s": round(error, 3)}


@pytest.mark.slow
def test_on_policy_runner_trains_go1(one_thread):
    num_envs, iterations = 16, 30
    env = gpu_envs.wrap(raw_env(task_cfg(GO1, num_envs, episode_length_s=None)))  # the task's own 20 s episodes
    training = Training(env, GO1, bootstrap=False)
    before = evaluate(training.vec, training.runner.get_inference_policy())
    training.learn(iterations)
    placeholders, ends = list(training.placeholders), list(training.ends)  # the training steps only
    after = evaluate(training.vec, training.runner.get_inference_policy())
    env.close()
    value_loss, noise = training.value_loss, training.noise
    print(
        f"\n[mjlab] Go1 flat, {num_envs} envs, {iterations} PPO iterations through to_rsl_rl: "
        f"value loss {value_loss[:3]} ... {value_loss[-3:]}, action std {noise[0]:.3f} -> {noise[-1]:.3f}, "
        f"{sum(ends)} episode ends in training; deterministic policy before {before}, after {after}",
        file=sys.stderr,
    )

    assert len(placeholders) == iterations * training.runner.cfg["num_steps_per_env"]
    assert not any(placeholders)
    assert sum(ends) >= num_envs, ends  # time-outs of random initial lengths, falls
    early, late = sum(value_loss[1:6]) / 5, sum(value_loss[-5:]) / 5
    assert late < 0.6 * early, value_loss
    assert noise[-1] < noise[0] - 0.01, noise


def test_mjlab_runner_checkpoints_through_to_rsl_rl(tmp_path, one_thread):
    """mjlab's own ``MjlabOnPolicyRunner`` (what ``mjlab/scripts/train.py`` runs): its ``save`` reads
    ``env.unwrapped.common_step_counter`` at every checkpoint and ``load`` writes it back. Before ``to_rsl_rl``
    had ``.unwrapped`` this failed at the first checkpoint (the training tests above never save)."""
    from mjlab.rl.runner import MjlabOnPolicyRunner

    env = gpu_envs.wrap(raw_env(task_cfg(CARTPOLE, 4, episode_length_s=5.0)))
    cfg = mjlab_train_cfg(CARTPOLE)
    cfg.update(num_steps_per_env=8, save_interval=1)
    with contextlib.redirect_stdout(io.StringIO()):
        vec = to_rsl_rl(env)
        runner = MjlabOnPolicyRunner(vec, cfg, log_dir=str(tmp_path), device="cpu")
        runner.learn(num_learning_iterations=2)
    saved = sorted(tmp_path.glob("model_*.pt"))
    assert saved, list(tmp_path.iterdir())
    counter = vec.unwrapped.common_step_counter
    assert counter > 0 and vec.unwrapped is env.backend.base
    vec.unwrapped.common_step_counter = 0
    with contextlib.redirect_stdout(io.StringIO()):
        runner.load(str(saved[-1]))
    assert (
        vec.unwrapped.common_step_counter
        == torch.load(saved[-1], weights_only=False)["infos"]["env_state"]["common_step_counter"]
        > 0
    )
    env.close()
