"""``RecordEpisodes``: whole episodes of chosen rows as mp4, aligned to the true boundaries, final frame included.

The oracle is the trajectory itself: an episode's frames must be the render of its first
observation and of the ``("next", obs)`` of each of its steps, the last one being the
true final observation. An image-observation env whose frames are solid colours coding
(row, episode, step) makes any shift, skip or reset frame visible after lossy H.264.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

import gpu_envs
from gpu_envs.builtin.render import render_cartpole, render_pendulum
from gpu_envs.rollout import collect
from gpu_envs.transforms import RecordEpisodes, TransformedEnv
from tests.fakes import CountingTorchVectorEnv, episode_length
from tests.sync_guard import no_sync

av = pytest.importorskip("av")  # the video extra: CI installs it

SIZE = (80, 120)  # small frames: fast tests


def decode(path) -> np.ndarray:
    with av.open(str(path)) as container:
        return np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)])


def _cartpole(n=6, seed=0):
    return gpu_envs.make("CartPole-v1", num_envs=n, device="cpu", seed=seed)


def _episodes(traj, row):
    """``[(first_step, last_step)]`` of the episodes of ``row`` that start and end inside ``traj``."""
    done = traj["next", "done"][row, :, 0].tolist()
    out, start = [], 0
    for t, d in enumerate(done):
        if d:
            out.append((start, t))
            start = t + 1
    return out


def _expected(traj, row, first, last, render):
    obs = torch.cat([traj["observation"][row, first : first + 1], traj["next", "observation"][row, first : last + 1]])
    return render(obs, *SIZE).numpy()


@pytest.mark.slow
@pytest.mark.parametrize("host_knows", [True, False], ids=["host-path", "async-ring-path"])
def test_cartpole_videos_are_the_episodes_frame_by_frame_with_the_true_final_frame(tmp_path, host_knows, one_thread):
    env = _cartpole()
    rec = RecordEpisodes.for_env(env, tmp_path, rows=[1, 4], size=SIZE)
    env = TransformedEnv(env, rec)
    env.reset()
    rec._host_knows = host_knows  # the ring path is the accelerator's; on the CPU its copies land at once
    traj = collect(env, steps=120)
    videos = rec.close()
    for row in (1, 4):
        episodes = _episodes(traj, row)
        assert len(episodes) >= 3
        for e, (first, last) in enumerate(episodes):
            path = tmp_path / f"row{row}-episode{e}.mp4"
            assert path in videos, path
            got, want = decode(path).astype(float), _expected(traj, row, first, last, render_cartpole).astype(float)
            assert got.shape == want.shape  # episode length + 1 frames: first observation .. final one
            assert np.abs(got - want).mean() < 1.0, (row, e)
            # the last frame is the true final observation, not the reset one that follows
            reset = render_cartpole(traj["observation"][row, last + 1 : last + 2], *SIZE)[0].numpy().astype(float)
            assert np.abs(got[-1] - want[-1]).mean() * 2 < np.abs(got[-1] - reset).mean()
    assert not list(tmp_path.glob("*.partial")), "the episodes still running at close() left no files"
    assert len(videos) == sum(len(_episodes(traj, r)) for r in (1, 4))


class ImageCountingEnv(CountingTorchVectorEnv):
    """The counting env with a uint8 image observation: a solid colour coding (row, episode, step)."""

    def __init__(self, num_envs=3):
        super().__init__(num_envs)
        import gymnasium as gym

        self.single_observation_space = gym.spaces.Box(0, 255, (32, 32, 3), np.uint8)

    def _obs(self):
        colour = torch.stack([self.t * 30 % 256, self.episode * 60 % 256, self.index * 80 % 256], dim=-1).to(
            torch.uint8
        )
        return colour[:, None, None, :].expand(self.num_envs, 32, 32, 3).contiguous()


def _colour_steps(video: np.ndarray) -> list[int]:
    """The step coded in each decoded frame (red channel / 30)."""
    return [round(float(frame[..., 0].mean()) / 30) for frame in video]


@pytest.mark.slow
def test_an_image_observation_group_is_recorded_with_the_final_frame_every_m_episodes(tmp_path):
    env = gpu_envs.wrap(ImageCountingEnv(3))
    rec = RecordEpisodes(tmp_path / "r{row}-e{episode}.mp4", rows=[0, 2], every=2)  # render=None: the lone image
    env = TransformedEnv(env, rec)
    env.reset()
    collect(env, steps=40)
    videos = rec.close()
    for row in (0, 2):
        made = sorted(int(re.search(r"-e(\d+)", p.name).group(1)) for p in videos if p.name.startswith(f"r{row}-"))
        assert made and all(e % 2 == 0 for e in made) and made == list(range(0, made[-1] + 1, 2))
        for e in made:
            frames = decode(tmp_path / f"r{row}-e{e}.mp4")
            length = episode_length(row, e)
            assert _colour_steps(frames) == list(range(length + 1)), (row, e)  # steps 0..T: the final frame too
            green = frames[..., 1].mean(axis=(1, 2))  # the episode, coded as e * 60 % 256
            assert (np.abs(green - e * 60 % 256) < 6).all(), (row, e, green)


@pytest.mark.slow
@pytest.mark.parametrize("host_knows", [True, False], ids=["host-path", "async-ring-path"])
def test_torchrl_style_step_then_masked_reset_keeps_every_episode(tmp_path, host_knows):
    from tensordict import TensorDict

    env = gpu_envs.wrap(ImageCountingEnv(3))
    rec = RecordEpisodes(tmp_path, rows=[0, 1])
    env = TransformedEnv(env, rec)
    td = env.reset()
    rec._host_knows = host_knows
    for _ in range(20):
        td["action"] = torch.zeros(3, dtype=torch.long)
        td = env.step(td)
        td = env.reset(td=TensorDict({"_reset": td["next", "done"]}, batch_size=[3]))  # ended rows only
    videos = rec.close()
    assert len(videos) >= 6
    for video in videos:
        row, e = map(int, re.fullmatch(r"row(\d+)-episode(\d+)\.mp4", video.name).groups())
        assert _colour_steps(decode(video)) == list(range(episode_length(row, e) + 1)), video.name


def test_a_reset_drops_the_episode_in_progress_and_max_videos_stops_recording(tmp_path):
    env = gpu_envs.wrap(ImageCountingEnv(2))
    rec = RecordEpisodes(tmp_path, rows=[1], max_videos=2)
    env = TransformedEnv(env, rec)
    env.reset()
    collect(env, steps=2)  # row 1's first episode lasts 3 steps: still running
    env.reset()  # interrupted: not recorded
    assert rec.flush() == [] and not list(tmp_path.glob("*.mp4*"))  # no video, no .partial
    collect(env, steps=60)
    videos = rec.close()
    assert [p.name for p in videos] == ["row1-episode1.mp4", "row1-episode2.mp4"]
    assert not list(tmp_path.glob("*.partial"))
    assert _colour_steps(decode(videos[0])) == list(range(episode_length(1, 1) + 1))


def test_one_named_video_for_the_cli_style_path(tmp_path):
    env = _cartpole(2)
    rec = RecordEpisodes.for_env(env, tmp_path / "out.mp4", size=SIZE)
    assert rec.max_videos == 1
    env = TransformedEnv(env, rec)
    env.reset()
    traj = collect(env, steps=80)
    assert rec.close() == [tmp_path / "out.mp4"]
    first, last = _episodes(traj, 0)[0]
    assert decode(tmp_path / "out.mp4").shape[0] == last - first + 2


def test_pendulum_frames_and_fps(tmp_path):
    env = gpu_envs.make("Pendulum-v1", num_envs=2, device="cpu", seed=1, max_episode_steps=20)
    rec = RecordEpisodes.for_env(env, tmp_path, rows=[1], size=(64, 64), max_videos=1)
    env = TransformedEnv(env, rec)
    env.reset()
    traj = collect(env, steps=25)
    (video,) = rec.close()
    got = decode(video).astype(float)
    obs = torch.cat([traj["observation"][1, :1], traj["next", "observation"][1, :20]])
    assert np.abs(got - render_pendulum(obs, 64, 64).numpy()).mean() < 1.5
    with av.open(str(video)) as container:
        assert container.streams.video[0].average_rate == 30  # gymnasium's Pendulum render_fps


def test_tensorboard_gets_the_video_as_an_animated_image(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    env = gpu_envs.wrap(ImageCountingEnv(2))
    rec = RecordEpisodes(tmp_path / "videos", rows=[0], max_videos=1, tensorboard=tmp_path / "runs")
    env = TransformedEnv(env, rec)
    env.reset()
    collect(env, steps=10)
    rec.close()
    events = EventAccumulator(str(tmp_path / "runs"), size_guidance={"images": 0})
    events.Reload()
    (image,) = events.Images("episodes/row0")
    assert image.step == 0 and image.encoded_image_string[:6] == b"GIF89a"


@pytest.mark.slow
def test_recording_renders_only_what_the_videos_take(tmp_path, one_thread):
    env = _cartpole(8)
    rendered = []
    hook = env.backend.env.render_observations

    def counting(obs, height=None, width=None):
        rendered.append(obs.shape[0])
        return hook(obs, height, width)

    env.backend.env.render_observations = counting
    rec = RecordEpisodes.for_env(env, tmp_path, rows=[3], every=3, size=SIZE)
    env = TransformedEnv(env, rec)
    env.reset()
    traj = collect(env, steps=150)
    rec.close()
    lengths = [last - first + 1 for first, last in _episodes(traj, 3)]
    recorded = [n for e, n in enumerate(lengths) if e % 3 == 0]
    ongoing = 1 if len(lengths) % 3 == 0 else 0  # an episode 0 mod 3 running at the end was filmed too
    assert sum(rendered) >= sum(n + 1 for n in recorded) and max(rendered) <= 2
    assert sum(rendered) <= sum(n + 1 for n in recorded) + ongoing * 150  # nothing for the episodes not filmed


@pytest.mark.slow
@pytest.mark.parametrize("host_knows", [True, False], ids=["host-path", "async-ring-path"])
def test_recording_never_syncs(tmp_path, host_knows):
    env = gpu_envs.wrap(ImageCountingEnv(4))
    rec = RecordEpisodes(tmp_path, rows=[0, 3])
    env = TransformedEnv(env, rec)
    td = env.reset()
    rec._host_knows = host_knows
    td["action"] = torch.zeros(4, dtype=torch.long)
    td, td = env.step_and_maybe_reset(td)  # the first step validates (allowed to sync)
    with no_sync():
        for _ in range(20):
            td["action"] = torch.zeros(4, dtype=torch.long)
            td, td = env.step_and_maybe_reset(td)
    assert len(rec.close()) >= 4


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"rows": []}, gpu_envs.InvalidArgumentError, "non-empty"),
        ({"rows": [1, 1]}, gpu_envs.InvalidArgumentError, "distinct"),
        ({"rows": [9]}, gpu_envs.InvalidArgumentError, "not rows of this env"),
        ({"every": 0}, gpu_envs.InvalidArgumentError, "every"),
        ({"fps": 0}, gpu_envs.InvalidArgumentError, "fps"),
        ({"render": 3}, gpu_envs.InvalidArgumentError, "render must be"),
        ({"render": "pixels"}, gpu_envs.InvalidArgumentError, "not an image observation"),
        ({}, gpu_envs.InvalidArgumentError, "for_env"),
    ],
)
def test_bad_arguments_are_clear_errors(tmp_path, kwargs, error, words):
    with pytest.raises(error, match=words):
        TransformedEnv(_cartpole(4), RecordEpisodes(tmp_path, **kwargs))


@pytest.mark.parametrize(
    ("path", "max_videos", "words"),
    [("v/{step}.mp4", None, "only the fields"), ("one.mp4", 3, "names one video"), ("", None, "folder or an .mp4")],
)
def test_bad_paths_are_clear_errors(path, max_videos, words):
    with pytest.raises(gpu_envs.InvalidArgumentError, match=re.escape(words)):
        RecordEpisodes(path, max_videos=max_videos)


def test_a_render_hook_returning_the_wrong_frames_is_named(tmp_path):
    rec = RecordEpisodes(tmp_path, render=lambda obs: torch.zeros(1, 8, 8, 3))
    env = TransformedEnv(_cartpole(2), rec)
    td = env.reset()
    td["action"] = torch.zeros(2, dtype=torch.long)
    with pytest.raises(gpu_envs.InvalidArgumentError, match=r"uint8 \[2, H, W, 3\]"):
        env.step(td)


def test_without_pyav_the_error_names_the_extra(monkeypatch, tmp_path):
    import builtins

    real = builtins.__import__

    def no_av(name, *args, **kwargs):
        if name == "av":
            raise ModuleNotFoundError("No module named 'av'", name="av")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_av)
    with pytest.raises(gpu_envs.MissingComponentError, match=re.escape("pip install '.[video]' in the gpu_envs clone")):
        RecordEpisodes(tmp_path)


@pytest.mark.slow
def test_a_gymnasium_env_rgb_array_through_its_pixels_observation(tmp_path):
    pytest.importorskip("pygame")
    env = gpu_envs.make(
        "CartPole-v1", num_envs=2, device="cpu", backend="gymnasium", seed=0, from_pixels=True, pixels_only=False
    )
    rec = RecordEpisodes(tmp_path, rows=[1], render="pixels", fps=50, max_videos=1)
    env = TransformedEnv(env, rec)
    env.reset()
    traj = collect(env, steps=60)
    (video,) = rec.close()
    first, last = _episodes(traj, 1)[0]
    got = decode(video).astype(float)
    want = torch.cat([traj["pixels"][1, first : first + 1], traj["next", "pixels"][1, first : last + 1]]).numpy()
    assert got.shape == want.shape and np.abs(got - want).mean() < 1.0
    assert not math.isnan(got.mean())


@pytest.mark.slow
def test_the_recording_benchmark_runs_and_charges_the_recorders(one_thread):
    from benchmarks.bench_record import run

    result = run(quick=True, sizes=(8,), rounds=1)
    rows = {row["contender"]: row for row in result["rows"]}
    assert set(rows) == {"off", "K=1", "K=4", "K=1 every=10", "K=1 400x600", "floor (K=1)"}
    assert all(row["us_per_step"] > 0 for row in rows.values())


@pytest.mark.slow
def test_the_example_films_both_envs_and_writes_the_readme_picture(tmp_path, one_thread):
    from tests.example_files import load_example

    result = load_example("record_video").main(
        ["--out", str(tmp_path / "videos"), "--png", str(tmp_path / "frames.png"), "--num-envs", "8", "--device", "cpu"]
    )
    assert [p.name for p in result["videos"]] == ["CartPole-v1-row0-episode0.mp4", "Pendulum-v1-row0-episode0.mp4"]
    assert len(decode(result["videos"][1])) == 201  # Pendulum: 200 steps to the time limit, + the first frame
    png = (tmp_path / "frames.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    with av.open(str(tmp_path / "frames.png")) as container:
        (frame,) = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert frame.shape == (500, 1108, 3) and frame.std() > 10  # CartPole 600 + gap 8 + Pendulum 500


@pytest.mark.parametrize(
    ("path", "kwargs", "words"),
    [
        ("vid-{row}.mp4", {"every": 1}, r"no \{episode\}"),  # once: 3 videos reported, 1 file on disk
        ("vid-{episode}.mp4", {"rows": [0, 1]}, r"no \{row\}"),  # once: 2 reported, 1 written
    ],
)
def test_names_that_would_overwrite_each_other_are_refused(tmp_path, path, kwargs, words):
    with pytest.raises(gpu_envs.InvalidArgumentError, match=words):
        RecordEpisodes(tmp_path / path, **kwargs)
    RecordEpisodes(tmp_path / path.replace(".mp4", "-{row}-{episode}.mp4"), **kwargs)  # the fix it names


def test_one_video_per_row_name_is_accepted_with_max_videos_1(tmp_path):
    env = TransformedEnv(
        _cartpole(2), rec := RecordEpisodes.for_env(_cartpole(2), tmp_path / "v{row}.mp4", size=SIZE, max_videos=1)
    )
    env.reset()
    collect(env, steps=80)
    assert [p.name for p in rec.close()] == ["v0.mp4"] and (tmp_path / "v0.mp4").exists()


def test_an_unwritable_path_is_refused_when_the_recorder_is_built(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(gpu_envs.InvalidArgumentError, match="cannot make the folder"):
        RecordEpisodes(blocker / "videos")  # before: reported only during collect


def test_close_after_a_failed_setup_keeps_the_setup_error(tmp_path):
    rec = RecordEpisodes(tmp_path, rows=[5])
    with pytest.raises(gpu_envs.InvalidArgumentError, match=r"rows \[5\]"):
        TransformedEnv(_cartpole(2), rec)
    assert rec.close() == [] and rec.flush() == []  # once: AttributeError '_slots'
    assert RecordEpisodes(tmp_path).close() == []  # never set up at all


def test_numpy_integers_count_for_every_rows_and_max_videos(tmp_path):
    rec = RecordEpisodes(tmp_path, rows=np.int64(1), every=np.int64(2), max_videos=np.int32(3))
    assert rec.every == 2 and type(rec.every) is int and rec.rows == (1,) and rec.max_videos == 3
