"""The job progress a retrain reports: the ETA follows the training steps' own rate."""

from worker.progress import ProgressReporter


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_eta_ignores_what_the_phase_spent_before_its_first_step() -> None:
    clock = Clock()
    progress = ProgressReporter(None, clock=clock)
    progress.phase("training")
    clock.now = 600.0  # teacher embeddings before the first step
    progress.step(1, 101, loss=0.5)
    clock.now = 610.0  # then 1 s a step
    progress.step(11, 101, loss=0.4)
    assert progress.state["eta_s"] == 90.0
    assert progress.state["percent"] == round(100 * 11 / 101, 2)


def test_a_resumed_run_is_timed_from_the_step_it_resumed_at() -> None:
    clock = Clock()
    progress = ProgressReporter(None, clock=clock)
    progress.phase("training")
    clock.now = 5.0
    progress.step(500, 1000, loss=0.3)
    clock.now = 25.0
    progress.step(510, 1000, loss=0.3)
    assert progress.state["eta_s"] == 2 * 490
