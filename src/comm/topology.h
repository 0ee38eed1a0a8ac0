/* Topology: which ranks share a node (DESIGN §11, "topology is data").
 *
 * A node is a set of ranks whose traffic among themselves stays inside one
 * machine's network stack: shared memory, loopback, NVLink. The runtime
 * learns it once, at zs_create, and every rank holds the same answer:
 *
 *   - comm.ranks_per_node = N > 0: consecutive groups of N ranks (ranks
 *     0..N-1 are node 0, ...; the last node may be smaller). For tests and
 *     benchmarks that simulate nodes on one machine.
 *   - comm.ranks_per_node = 0 (default): from each rank's host identity
 *     (zs__host_identity below), all-gathered over the runtime's own
 *     communicator, so the agreement has the deadline of every other
 *     collective (comm.timeout_s): MPI_Comm_split_type, the usual way, waits
 *     forever for a rank that never arrives.
 *
 * Nodes are numbered by their lowest rank (rank 0 is on node 0); a rank's
 * local rank is its index among its node's ranks in rank order. Detected
 * nodes need not hold consecutive ranks (mpirun --map-by node deals them
 * round-robin), so the arrays below are the truth, not rank / node_size.
 *
 * Nodes of unequal size are recorded, not refused: plain data parallelism
 * works with any topology. A mode that needs equal nodes (hybrid sharding,
 * a node-local secondary partition) calls zs__topology_require_equal, which
 * fails alike on every rank with a message naming the nodes and sizes.
 *
 * The struct is plain data for the layers above; it never changes after
 * zs__topology_agree. */
#ifndef ZS_COMM_TOPOLOGY_H
#define ZS_COMM_TOPOLOGY_H

#include <stddef.h>
#include <stdint.h>

#include "zeroshard.h"

typedef struct zs__comm zs__comm;

/* What tells one node from another. Two ranks are on one node when all of
 * these are equal:
 *   host     gethostname(): different machines, as the user names them;
 *   boot_id  /proc/sys/kernel/random/boot_id: one running kernel; tells
 *            apart machines that share a host name (cloned VMs, containers
 *            that all call themselves "localhost");
 *   netns    the network namespace (st_dev and st_ino of /proc/self/ns/net):
 *            ranks in different namespaces of one kernel cannot use shared
 *            memory transports' usual set-up and reach each other only
 *            through a network device (a veth pair, a container bridge), as
 *            separate hosts would. This is what makes the two simulated
 *            hosts of scripts/netns-hosts.sh two nodes: they share the host
 *            name and the kernel but not the namespace.
 * MPI_Get_processor_name alone (the host name) cannot separate them. Where
 * a /proc file is missing (not Linux) its field stays zero and the others
 * decide. Fixed size and plain bytes: ranks exchange it as bytes. */
typedef struct zs__host_identity {
    char host[256];
    char boot_id[40];
    uint64_t netns_dev;
    uint64_t netns_ino;
} zs__host_identity;

/* This process's identity (memset to zero first, so it compares as bytes). */
void zs__host_identity_get(zs__host_identity *out);

typedef struct zs__topology {
    int world_size;
    int rank;
    int64_t ranks_per_node;  /* comm.ranks_per_node: 0 = detected from identities */
    int node_count;
    int node;                /* this rank's node, 0..node_count-1 */
    int local_rank;          /* this rank's index on its node */
    int node_size;           /* ranks on this rank's node */
    int max_node_size;       /* ranks on the largest node */
    int equal;               /* 1 when every node has node_size ranks */
    int *node_of;            /* [world_size] node of each rank */
    int *local_of;           /* [world_size] local rank of each rank */
    int *node_sizes;         /* [node_count] ranks on each node */
    int *node_first;         /* [node_count] the lowest rank of each node */
    int *node_offset;        /* [node_count] where each node's ranks start in by_node */
    int *by_node;            /* [world_size] the ranks in (node, local rank) order */
    zs__host_identity *identities; /* [world_size] detection only; NULL with the key */
} zs__topology;

/* Allocates the topology of `world_size` ranks for `rank` (local: no
 * communication; ZS_ERR_OUT_OF_MEMORY names the bytes). With ranks_per_node
 * > 0 the topology is complete at once; with 0 it holds this rank's
 * identity and zs__topology_agree finishes it. The caller agrees on the
 * outcome across ranks before the next collective (an allocation may fail
 * on one rank only). */
zs_status zs__topology_create(int world_size, int rank, int64_t ranks_per_node,
                              zs__topology **out);

/* Collective over `world` (the runtime's communicator, world_size ranks):
 * all-gathers the identities (deadline, fingerprints and counters of any
 * all-gather; no heap memory up to a few thousand ranks) and derives the
 * nodes; a no-op with ranks_per_node > 0. Then logs the topology at INFO
 * (rank 0). Every rank ends with the same arrays. */
zs_status zs__topology_agree(zs__topology *t, zs__comm *world);

/* ZS_OK when every node has the same number of ranks; otherwise
 * ZS_ERR_CONFIG, the same on every rank, naming `what` (the setting that
 * needs it, e.g. "zero.shard_group = \"node\""), each node's ranks and size,
 * and what to change. */
zs_status zs__topology_require_equal(const zs__topology *t, const char *what);

/* The rank that is local rank `local` on node `node`, or -1 when that node
 * has no such rank. Constant time (a table): qgZ asks for every rank of
 * every unit. */
int zs__topology_rank_of(const zs__topology *t, int node, int local);

/* One line: "4 ranks on 2 nodes of 2 (comm.ranks_per_node = 2): node 0 =
 * ranks 0-1, ..." (truncated to capacity). */
void zs__topology_describe(const zs__topology *t, char *out, size_t capacity);

/* NULL is a no-op. */
void zs__topology_destroy(zs__topology *t);

#endif
