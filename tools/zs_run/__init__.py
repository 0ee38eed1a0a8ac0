"""zs-run: a launcher that restarts a failed zeroshard job without a person.

One concept per module:

    cli        the command line (options, help text) and the program's entry
    supervise  the restart loop: launch, watch, gather the facts, decide, log, back off
    decide     the pure decision: which hosts and how many ranks next, or why to stop
               or give up
    hosts      hosts with slots and addresses: parsing, resolution, rank layout
    probe      whether a host can still be reached (through the launcher itself)
    slurm      the hosts of a Slurm allocation and srun's command line
    launch     one job: mpirun/srun in its own process group, its output, its end
    job_output what mpirun's and the program's output say (deaths, steps, resume)
    reports    the runtime's exit reports and the checkpoint root (latest; the
               generation, taken under a lock by one launcher at a time)
    estimate   the memory check through zs-estimate before shrinking the world
    cfgread    the few keys zs-run reads from the program's libconfig file
    restart_log  the restart log, one JSON object per line

Python's standard library only: the launcher must run on a fresh machine
with nothing but python3.
"""
