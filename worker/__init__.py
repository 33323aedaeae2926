"""Background retraining: an RQ worker that trains a student, gates it, bundles it, publishes it.

`core.jobs` is the light half that the admin API imports (submit, list, inspect, cancel);
`worker.retrain` is the job itself, imported only inside the worker's forked work horse;
`worker.runner` is the worker process behind `rankserve worker`.
"""
