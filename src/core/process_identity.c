/* A process as its peers can check it from the same machine (see
 * process_identity.h). */
#include "core/process_identity.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The state letter and start time of /proc/<pid>/stat: 1 when read. The
 * command name (field 2) is in parentheses and may hold spaces and ')', so
 * the fields are counted from the last ')'. */
static int read_stat(int64_t pid, char *state, uint64_t *start_ticks) {
    char path[64], text[1024];
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    const ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0) return 0;
    text[n] = '\0';
    const char *p = strrchr(text, ')');
    if (!p || p[1] != ' ' || !p[2]) return 0;
    *state = p[2];
    /* Field 3 is the state; the start time is field 22: 19 fields on. */
    p += 2;
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p) return 0;
        p++;
    }
    char *end = NULL;
    *start_ticks = strtoull(p, &end, 10);
    return end != p;
}

void zs__node_identity_read(char *boot_id, size_t capacity, uint64_t *netns_dev,
                            uint64_t *netns_ino) {
    boot_id[0] = '\0';
    *netns_dev = *netns_ino = 0;
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot_id, (int)capacity, f)) boot_id[0] = '\0';
        boot_id[strcspn(boot_id, "\n")] = '\0';
        fclose(f);
    }
    struct stat ns;
    if (stat("/proc/self/ns/net", &ns) == 0) {
        *netns_dev = (uint64_t)ns.st_dev;
        *netns_ino = (uint64_t)ns.st_ino;
    }
}

void zs__process_identity_get(zs__process_identity *out) {
    memset(out, 0, sizeof *out);
    zs__node_identity_read(out->boot_id, sizeof out->boot_id, &out->netns_dev, &out->netns_ino);
    struct stat ns;
    if (stat("/proc/self/ns/pid", &ns) == 0) {
        out->pidns_dev = (uint64_t)ns.st_dev;
        out->pidns_ino = (uint64_t)ns.st_ino;
    }
    out->pid = (int64_t)getpid();
    char state = 0;
    if (!read_stat(out->pid, &state, &out->start_ticks)) out->start_ticks = 0;
}

zs__process_state zs__process_state_of(const zs__process_identity *self,
                                       const zs__process_identity *peer) {
    if (!self->boot_id[0] || self->pidns_ino == 0 || peer->start_ticks == 0 || peer->pid <= 0 ||
        strncmp(self->boot_id, peer->boot_id, sizeof self->boot_id) != 0 ||
        self->netns_dev != peer->netns_dev || self->netns_ino != peer->netns_ino ||
        self->pidns_dev != peer->pidns_dev || self->pidns_ino != peer->pidns_ino)
        return ZS_PROCESS_UNKNOWN;
    char state = 0;
    uint64_t start = 0;
    /* No /proc entry: the pid is free, the process is gone. */
    if (!read_stat(peer->pid, &state, &start)) return ZS_PROCESS_GONE;
    if (start != peer->start_ticks) return ZS_PROCESS_GONE; /* the pid was reused */
    /* Z: dead, waiting for its parent; X: being torn down. */
    return state == 'Z' || state == 'X' ? ZS_PROCESS_GONE : ZS_PROCESS_ALIVE;
}
