"""Every run's kernel work happens in a worker process that the run's own process supervises.

`supervisor` (the command line's process, or a sweep launcher's job) owns the MLflow record,
starts one worker and reuses it for the jobs that follow, gives each stage a time limit, and
kills the worker on a hang, a fault, Ctrl-C or SIGTERM: only killing the process that holds a
kernel frees the device. `worker` runs the run pipeline (`runner.run`) and sends everything it
would record, and each sign of progress, back over a pipe. `faults` names device faults.
"""
