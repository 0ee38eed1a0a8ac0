/* A host as a launcher tells it apart: its name and its network addresses.
 *
 * Host names are not unique (cloned VMs, containers that all call themselves
 * "localhost", the two simulated hosts of scripts/netns-hosts.sh), and a
 * launcher that excludes a failed host must reach the same machine again by
 * what the network knows it by. Exit reports (core/exit_report.h) therefore
 * name a host by both. Fixed size and plain bytes: ranks all-gather it at
 * zs_create (zero/job.c) so that a report can name a peer's host. */
#ifndef ZS_CORE_HOST_ADDRESSES_H
#define ZS_CORE_HOST_ADDRESSES_H

#include <stdint.h>

#define ZS_HOST_NAME_BYTES 64     /* Linux's HOST_NAME_MAX is 64 with the NUL */
#define ZS_HOST_ADDRESS_BYTES 46  /* INET6_ADDRSTRLEN */
#define ZS_HOST_ADDRESSES_MAX 4   /* enough to tell hosts apart; the rest are left out */

typedef struct zs__host_addresses {
    char host[ZS_HOST_NAME_BYTES];
    int32_t count;
    int32_t pad;
    char address[ZS_HOST_ADDRESSES_MAX][ZS_HOST_ADDRESS_BYTES];
} zs__host_addresses;

/* This host's name and up to ZS_HOST_ADDRESSES_MAX of its non-loopback IP
 * addresses as text, IPv4 first, then IPv6 (link-local fe80::/10 left out:
 * every interface has one, so it names no host to a launcher), duplicates
 * removed, in interface order. The struct is zeroed first, so it compares
 * as bytes. A host without addresses (or where getifaddrs fails) gets
 * count 0; a name that cannot be read is "". Not collective. */
void zs__host_addresses_get(zs__host_addresses *out);

#endif
