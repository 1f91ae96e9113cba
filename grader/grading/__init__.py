"""The instructor's grading (`python -m grader grade`): a class's submissions checked before they
run (`preflight`), run in a sandbox (`sandbox`, with `runner` and `harness` inside it), judged
outside the learner's process (`grade`), and recorded (`gradebook`, `feedback`, `report`), by a
pool of workers (`workers`) over a folder or a shard of a class (`batch`, `shards`). `settings`
holds every limit."""
