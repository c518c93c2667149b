"""Which jobs SLURM holds for a sweep folder, read from ``squeue``'s lines as the local SLURM
prints them (tests/test_slurm.py runs the commands that ask it on the real thing)."""

from __future__ import annotations

from isotune.sweeps.slurm_jobs import SlurmJob, jobs_of_folder, live_jobs


def squeue_lines(*jobs: tuple[str, str, str]) -> str:
    """``squeue --noheader --array --Format=JobArrayID:|,State:|,STDOUT:`` of these jobs."""
    return "".join(f"{job}|{state}|{stdout}\n" for job, state, stdout in jobs)


def test_a_folders_jobs_are_those_whose_output_file_lies_in_its_submitit_folder(tmp_path):
    sweep = tmp_path / "logs" / "multirun" / "2026-12-02_10-00-00"
    other = tmp_path / "logs" / "multirun" / "2026-12-02_10-00-001"  # same prefix, another sweep
    pattern = ".submitit/%A_%a/%A_%a_0_log.out"  # as submitit sends an array, unexpanded
    output = squeue_lines(
        ("7_0", "PENDING", f"{sweep}/{pattern}"),
        ("7_1", "RUNNING", f"{sweep}/{pattern}"),
        ("8", "PENDING", f"{sweep}/.submitit/%j/%j_0_log.out"),  # a single job
        ("9_0", "PENDING", f"{other}/{pattern}"),
        ("10", "RUNNING", f"{tmp_path}/slurm-%j.out"),  # a job of the user's own
        ("11", "PENDING", f"{sweep}/0/my.out"),  # in the sweep, but not sent by its launcher
        ("7_2", "COMPLETING", f"{sweep}/{pattern}"),  # ending: it sends nothing more
        ("12", "PENDING", ""),  # no output file SLURM could name
    )
    assert jobs_of_folder(output, sweep) == [
        SlurmJob("7_0", "PENDING"),
        SlurmJob("7_1", "RUNNING"),
        SlurmJob("8", "PENDING"),
    ]
    assert [job.array_id for job in jobs_of_folder(output, sweep)] == ["7", "7", "8"]
    assert jobs_of_folder(output, other) == [SlurmJob("9_0", "PENDING")]
    assert jobs_of_folder("", sweep) == []


def test_a_folder_reached_through_a_link_is_the_same_folder(tmp_path):
    sweep = tmp_path / "sweep"
    (sweep / ".submitit").mkdir(parents=True)
    (tmp_path / "link").symlink_to(sweep)
    output = squeue_lines(("3_0", "PENDING", f"{tmp_path}/link/.submitit/%A_%a/%A_%a_0_log.out"))
    assert jobs_of_folder(output, sweep) == [SlurmJob("3_0", "PENDING")]
    assert jobs_of_folder(output, tmp_path / "link") == [SlurmJob("3_0", "PENDING")]


def test_a_folder_that_sent_nothing_to_slurm_asks_nobody(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no squeue: asking would fail
    assert live_jobs(tmp_path) == []
    (tmp_path / ".submitit").mkdir()
    assert live_jobs(tmp_path) == []  # sent jobs, but SLURM is not installed here
