"""The JaxMARL backend's edges: ids, refused wrappers, errors, spaces, groups, and envs whose endings gpu_envs cannot classify.

Switch Riddle ends an episode when an agent speaks (the task's end) or at its horizon
(``step + 1 >= max_steps``), with one ``done`` for both: gpu_envs cannot tell them apart,
so by default it reports every end as ``terminated`` (``done_as="truncated"`` says
otherwise); its transitions are still checked against JaxMARL driven by hand.
"""

from __future__ import annotations

import doctest
import importlib
import sys

import jaxmarl
import numpy as np
import pytest
import torch
from jaxmarl.wrappers.baselines import LogWrapper, MPELogWrapper

import gpu_envs
from gpu_envs.backends.jax.jaxmarl import spec_from_jaxmarl
from gpu_envs.contract.errors import InvalidArgumentError, NotAnEnvError, SpecError, UnknownEnvError
from gpu_envs.contract.specs import Box, Discrete, MultiDiscrete
from tests.jaxmarl.oracle import assert_matches, batched, random_actions, reference
from tests.processes import run_tree

pytestmark = pytest.mark.slow  # JaxMARL's import and the JIT compiles of its envs: seconds each
N, SEED = 4, 9


def test_jaxmarl_ids_are_listed_and_made():
    ids = gpu_envs.available_envs()["jax"]
    assert "jaxmarl/MPE_simple_spread_v3" in ids and "jaxmarl/SMAX" in ids
    with pytest.raises(UnknownEnvError, match="not a JaxMARL env"):
        gpu_envs.make("jaxmarl/MPE_no_such_v0", num_envs=2, device="cpu")


def test_wrappers_and_missing_num_envs_are_refused_with_the_fix():
    raw = jaxmarl.make("MPE_simple_spread_v3")
    for wrapper in (LogWrapper(raw), MPELogWrapper(raw)):
        with pytest.raises(NotAnEnvError, match=r"JaxMARL wrapper.*gpu_envs.wrap\(jaxmarl.make\(name\), num_envs=N\)"):
            gpu_envs.wrap(wrapper, num_envs=N)
    with pytest.raises(InvalidArgumentError, match="how many to batch"):
        gpu_envs.wrap(raw, device="cpu")
    with pytest.raises(InvalidArgumentError, match="done_as="):
        gpu_envs.wrap(raw, num_envs=N, device="cpu", done_as="timeout")
    with pytest.raises(SpecError, match="leaves out"):
        gpu_envs.wrap(raw, num_envs=N, device="cpu", group_map={"a": ["agent_0"]})


def test_jaxmarl_spaces_become_specs():
    raw = jaxmarl.make("MPE_simple_speaker_listener_v4", action_type="Continuous")
    speaker = spec_from_jaxmarl(raw.action_space("speaker_0"), action=True)
    assert isinstance(speaker, Box) and speaker.shape == (3,) and float(speaker.low.min()) == 0.0
    obs = spec_from_jaxmarl(raw.observation_space("listener_0"))
    assert isinstance(obs, Box) and obs.shape == (11,) and torch.isinf(obs.high).all()
    riddle = jaxmarl.make("switch_riddle")
    assert spec_from_jaxmarl(riddle.action_space("agent_0"), action=True) == Discrete(riddle.action_space("agent_0").n)
    observation = spec_from_jaxmarl(riddle.observation_space("agent_0"))
    assert isinstance(observation, MultiDiscrete) and observation.dtype == torch.int32


def test_agents_whose_specs_differ_get_a_group_each_and_group_map_chooses():
    env = gpu_envs.make("jaxmarl/MPE_simple_speaker_listener_v4", num_envs=2, device="cpu")
    assert env.group_map == {"speaker": ["speaker_0"], "listener": ["listener_0"]}
    assert env.full_action_spec["speaker", "action"].shape == (2, 1)
    assert env.full_observation_spec["listener", "observation"].shape == (2, 1, 11)
    env.close()
    env = gpu_envs.make(
        "jaxmarl/MPE_simple_spread_v3",
        num_envs=2,
        device="cpu",
        group_map={"lead": ["agent_2"], "rest": ["agent_0", "agent_1"]},
    )
    raw = jaxmarl.make("MPE_simple_spread_v3")
    actions = random_actions(raw, 2, 4, seed=0)
    assert_matches(env, batched(env, actions, SEED), reference(raw, actions, SEED))
    assert env.full_observation_spec["rest", "observation"].shape == (2, 2, 18)
    env.close()


@pytest.mark.parametrize("done_as", ["auto", "truncated"])
def test_an_env_that_ends_two_ways_reports_terminated_unless_told(done_as):
    raw = jaxmarl.make("switch_riddle")
    env = gpu_envs.wrap(raw, num_envs=N, device="cpu", done_as=done_as)
    actions = random_actions(raw, N, 30, seed=5)
    want = reference(raw, actions, SEED, {3: [2]})
    got = batched(env, actions, SEED, {3: [2]})
    assert_matches(env, got, want, ending="terminated" if done_as == "auto" else "truncated")
    assert got["obs/agent_0"].dtype == np.int32
    assert want["done"].sum() >= 8
    env.close()


def test_mpe_ends_are_truncations_unless_told():
    raw = jaxmarl.make("MPE_simple_spread_v3", max_steps=2)
    env = gpu_envs.wrap(raw, num_envs=2, device="cpu", done_as="terminated")
    actions = random_actions(raw, 2, 6, seed=1)
    want = reference(raw, actions, SEED)
    assert_matches(env, batched(env, actions, SEED), want, ending="terminated")
    assert want["done"].sum() == 4
    env.close()


def test_making_a_jaxmarl_env_keeps_the_callers_output_streams():
    """JaxMARL 0.2's first import sets sys.stdout/sys.stderr to the process's own; gpu_envs' import puts the caller's back.

    In a fresh process (this one imported JaxMARL long ago): a redirect around
    ``gpu_envs.make("jaxmarl/...")`` still catches what is printed after it, as a notebook's
    output stream would.
    """
    code = (
        "import contextlib, io, sys\n"
        "import gpu_envs\n"
        "out, err = io.StringIO(), io.StringIO()\n"
        "with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):\n"
        "    gpu_envs.make('jaxmarl/MPE_simple_spread_v3', num_envs=2, device='cpu').close()\n"
        "    print('printed after make')\n"
        "    print('written to stderr after make', file=sys.stderr)\n"
        "assert 'printed after make' in out.getvalue(), out.getvalue()\n"
        "assert 'written to stderr after make' in err.getvalue(), err.getvalue()\n"
        "print('streams kept')\n"
    )
    done = run_tree([sys.executable, "-c", code], timeout=600)  # JaxMARL's import: ~10 s idle
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "streams kept"
    assert "printed after make" not in done.stdout  # it went to the caller's buffer, not the terminal


@pytest.mark.parametrize("name", ["gpu_envs.backends.jax.jaxmarl", "gpu_envs.backends.jax.jaxmarl_core"])
def test_docstring_examples_run_with_jaxmarl(name):
    """The main suite's doctest run skips these modules (no JaxMARL there); here they run."""
    module = importlib.import_module(name)
    failures, tried = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert tried >= 5 and failures == 0
