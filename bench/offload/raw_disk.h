/* The raw disk that the NVMe benchmarks compare against: plain pwrite/pread
 * of whole blocks on an unlinked file, O_DIRECT where the swap file has it,
 * from q threads (blocks k, k + q, ... on thread k). Benchmarks only. */
#ifndef ZS_BENCH_RAW_DISK_H
#define ZS_BENCH_RAW_DISK_H

#include <stddef.h>
#include <stdint.h>

double raw_disk_now(void); /* seconds, monotonic */
/* An unlinked file of `bytes` under dir, reserved; -1 (message printed) on failure. */
int raw_disk_open(const char *dir, int direct, uint64_t bytes);
/* Seconds to write (or read) every block once with q threads, each using
 * bufs[k]; -1 (message printed) on failure. */
double raw_disk_pass(int fd, int is_write, size_t block, uint64_t blocks, int q,
                     unsigned char **bufs);

#endif
