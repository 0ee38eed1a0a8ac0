/* A process as its peers can check it from the same machine: alive, or gone.
 *
 * When mpirun (or a scheduler) tears a job down after one rank died, it
 * signals the survivors in steps (Open MPI 4.1: SIGCONT at once, SIGTERM a
 * second later, SIGKILL a second after that). A survivor that can see the
 * dead rank's process for itself need not wait for those steps: the pid of
 * every rank is gathered at zs_create, and a rank on the same node reads
 * /proc to learn whether the peer still runs. The same node is what the
 * topology calls one (comm/topology.h: the same running kernel and network
 * namespace; the two simulated hosts of scripts/netns-hosts.sh are two),
 * in the same pid namespace (else the pid names another process). A pid alone is not enough: it is reused once freed, so
 * the process's start time (in clock ticks since boot) must match too, and
 * a zombie (killed, not yet reaped by its parent) counts as gone.
 *
 * Fixed size and plain bytes: ranks exchange it as bytes. */
#ifndef ZS_CORE_PROCESS_IDENTITY_H
#define ZS_CORE_PROCESS_IDENTITY_H

#include <stddef.h>
#include <stdint.h>

typedef struct zs__process_identity {
    char boot_id[40];     /* /proc/sys/kernel/random/boot_id: one running kernel */
    uint64_t netns_dev;   /* st_dev and st_ino of /proc/self/ns/net */
    uint64_t netns_ino;
    uint64_t pidns_dev;   /* st_dev and st_ino of /proc/self/ns/pid */
    uint64_t pidns_ino;
    int64_t pid;
    uint64_t start_ticks; /* field 22 of /proc/<pid>/stat */
} zs__process_identity;

/* This machine's running kernel (its boot id, NUL-terminated in
 * boot_id[0..capacity)) and this process's network namespace: what tells
 * nodes apart (comm/topology.h reads them for its node identity too).
 * What cannot be read is "" and 0. */
void zs__node_identity_read(char *boot_id, size_t capacity, uint64_t *netns_dev,
                            uint64_t *netns_ino);

/* This process's identity; fields that cannot be read stay zero (the
 * process is then never judged from elsewhere). Not collective. */
void zs__process_identity_get(zs__process_identity *out);

typedef enum zs__process_state {
    ZS_PROCESS_UNKNOWN = -1, /* another node or pid namespace, or unreadable identity */
    ZS_PROCESS_ALIVE = 0,
    ZS_PROCESS_GONE = 1      /* exited, killed, a zombie, or its pid now names another process */
} zs__process_state;

/* What `self` can tell of `peer` from here. Reads /proc/<pid>/stat once;
 * thread-safe, not async-signal-safe. */
zs__process_state zs__process_state_of(const zs__process_identity *self,
                                       const zs__process_identity *peer);

#endif
