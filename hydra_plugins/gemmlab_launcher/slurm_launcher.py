"""gemmlab's Slurm launcher (`hydra/launcher=slurm`, `slurm_cpu`): Hydra's submitit Slurm
launcher, with every Slurm outcome in gemmlab's words (runner/sweep/slurm.py).

In the submitting process: the jobs' request is checked against the partition's nodes before
anything is queued (one line naming the key to change); the jobs are named after the sweep;
`sbatch`'s refusal is one line; the queue is followed with `squeue` (the progress line shows
pending jobs and Slurm's reason), not with submitit's `sacct` polling, which a cluster without
accounting answers with warnings; Ctrl-C or SIGTERM cancels the sweep's jobs, says so, and waits
for the running ones to record their end before the parent run is closed. Jobs that left no
result (cancelled while pending, a node failure) are never a traceback: their runs, or their
absence, say what happened (the sweep's callback ends a run its job could not).

In each job: Slurm's SIGTERM ends the run KILLED ("cancelled by Slurm") or `timeout` at the time
limit, where submitit would ignore it, and submitit's SIGUSR2 before the limit does not requeue
the job (a sweep job is measured once; the same command resumes what was not).
"""

import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher
from omegaconf import OmegaConf

log = logging.getLogger(__name__)
RESULT_WAIT_S = 5.0  # a job's result file on a slow shared filesystem, once Slurm says it ended
CANCEL_WAIT_S = 60.0  # cancelled jobs recording their end (Slurm's KillWait is 30 s by default)


class GemmlabSlurmLauncher(SlurmLauncher):

    # ------------------------------------------------------------ inside a job

    def __call__(self, sweep_overrides: List[str], job_dir_key: str, job_num: int,
                 job_id: str, singleton_state: Dict[type, Singleton]) -> JobReturn:
        from runner.sweep.slurm import install_job_signals
        from runner.terminal.interrupts import SlurmEnded

        install_job_signals(self.params.get("timeout_min"))
        try:
            return super().__call__(sweep_overrides, job_dir_key, job_num, job_id,
                                    singleton_state)
        except SlurmEnded as ended:  # the run has recorded it (runner/app.py)
            log.warning("Slurm ended job #%d: %s", job_num, ended.reason)
            return JobReturn(overrides=list(sweep_overrides), status=JobStatus.COMPLETED)

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        return None  # never requeued: a sweep job is measured once

    # ------------------------------------------------------------ the submitting process

    def launch(self, job_overrides: Sequence[Sequence[str]],
               initial_job_idx: int) -> Sequence[JobReturn]:
        import submitit
        from runner.errors import RunError
        from runner.record.slurm_env import COMMAND_ENV, typed_command
        from runner.sweep import slurm
        from runner.sweep.definition import sweep_definition, sweep_name
        from runner.terminal.summary import console

        assert self.config is not None
        logging.getLogger("submitit").setLevel(logging.ERROR)  # its sacct polling's warnings
        slurm.check_request(self.params)
        os.environ.setdefault(COMMAND_ENV, typed_command(sys.argv))  # inherited by sbatch
        executor = self.executor(slurm.job_name(sweep_name(self.config,
                                                           sweep_definition(self.config))))
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        arguments = []
        for number, overrides in enumerate(job_overrides, start=initial_job_idx):
            log.info("\t#%d : %s", number, " ".join(filter_overrides(overrides)))
            arguments.append((list(overrides), "hydra.sweep.dir", number,
                              f"job_id_for_{number}", Singleton.get_state()))
        try:
            jobs = executor.map_array(self, *zip(*arguments))
        except submitit.core.utils.FailedJobError as error:
            said = [line for line in str(error).splitlines() if "error" in line.lower()]
            raise RunError("Slurm refused the sweep's jobs: "
                           + (said[-1].strip() if said else str(error).strip()[:300])) \
                from None
        queue = slurm.SweepQueue(sorted({job.job_id.split("_")[0] for job in jobs}),
                                 len(jobs))
        slurm.follow(queue)
        log.info("submitted %d jobs to Slurm: array %s", len(jobs), ", ".join(queue.array_ids))
        try:
            said = ""
            while queue.poll():
                if not console.is_terminal and queue.line() != said:  # else the progress bar's
                    said = queue.line()
                    console.print(f"gemmlab: {said}")
                time.sleep(queue.POLL_S)
        except KeyboardInterrupt:
            try:
                said = queue.cancel()
                console.print(f"gemmlab: {said}; waiting for the running ones to record their "
                              f"end")
                queue.wait_until_gone(CANCEL_WAIT_S)
            except RunError as error:  # Slurm does not answer: say so, the interrupt stands
                console.print(f"gemmlab: could not cancel the sweep's Slurm jobs (array "
                              f"{', '.join(queue.array_ids)}): {error}; scancel them")
            except KeyboardInterrupt:  # a second Ctrl-C: the parent closes without waiting
                pass
            raise
        return [self._outcome(job, overrides, queue)
                for job, overrides in zip(jobs, job_overrides)]

    def executor(self, job_name: str):
        """submitit's Slurm executor with this launcher's parameters, the jobs named
        `job_name` (its `_make_submission_file_text` shows the sbatch script it submits)."""
        import submitit

        executor = submitit.AutoExecutor(
            cluster="slurm", folder=self.params["submitit_folder"],
            slurm_max_num_timeout=self.params.get("max_num_timeout", 0))
        shared = set(OmegaConf.structured(BaseQueueConf).keys())
        skipped = {"submitit_folder", "max_num_timeout"}
        params = {key if key in shared else f"slurm_{key}": value
                  for key, value in self.params.items() if key not in skipped}
        params["name"] = job_name
        executor.update_parameters(**params)
        return executor

    @staticmethod
    def _outcome(job, overrides: Sequence[str], queue) -> JobReturn:
        """The job's own JobReturn where it wrote one; else a completed one with no value (the
        job's run, or its absence, says what happened: the sweep's summary reads the runs)."""
        from submitit.core.utils import pickle_load

        deadline = time.monotonic() + RESULT_WAIT_S
        while not job.paths.result_pickle.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        if job.paths.result_pickle.exists():
            outcome, result = pickle_load(job.paths.result_pickle)
            if outcome == "success" and isinstance(result, JobReturn):
                return result
            log.warning("Slurm job %s raised:\n%s", job.job_id, result)
        else:
            ended = queue.ended_by_slurm(job.job_id)
            log.warning("Slurm job %s left no result%s", job.job_id,
                        f": {ended}" if ended else "")
        return JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED)
