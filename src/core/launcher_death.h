/* Ranks end when their launcher dies (issue 29, "Also" item 5).
 *
 * When mpirun (or an orted, or slurmstepd) is killed with SIGKILL it cannot
 * take its ranks down, and they were seen alive half a second later and
 * longer: still holding GPUs, still able to write into a checkpoint root
 * that a relaunched job now uses. Linux can deliver a signal to a process
 * when its parent dies (prctl PR_SET_PDEATHSIG); zs_create arms it when the
 * process was started by a launcher (OMPI_COMM_WORLD_RANK or PMIX_RANK in
 * the environment), and zs_destroy puts the program's own setting back. */
#ifndef ZS_CORE_LAUNCHER_DEATH_H
#define ZS_CORE_LAUNCHER_DEATH_H

/* Arms the parent-death signal (SIGKILL) if launched by mpirun or PMIx, and
 * ends the process at once if the parent died before it was armed. Returns
 * 1 when armed, 0 when not (not launched that way, or not Linux). Counted:
 * the first call arms, later ones only count. */
int zs__launcher_death_arm(void);
/* The last of the calls matching zs__launcher_death_arm restores the
 * parent-death signal the process had before. */
void zs__launcher_death_disarm(void);

#endif
