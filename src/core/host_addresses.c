/* This host's name and addresses (see host_addresses.h). */
#define _DEFAULT_SOURCE /* getifaddrs, struct ifaddrs, IFF_LOOPBACK */
#include "core/host_addresses.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Adds the text of `addr` unless it is there already or the list is full. */
static void add(zs__host_addresses *out, const struct sockaddr *addr) {
    if (out->count >= ZS_HOST_ADDRESSES_MAX) return;
    char text[ZS_HOST_ADDRESS_BYTES] = "";
    const void *raw = addr->sa_family == AF_INET
                          ? (const void *)&((const struct sockaddr_in *)(const void *)addr)->sin_addr
                          : (const void *)&((const struct sockaddr_in6 *)(const void *)addr)->sin6_addr;
    if (!inet_ntop(addr->sa_family, raw, text, sizeof text)) return;
    for (int i = 0; i < out->count; i++)
        if (strcmp(out->address[i], text) == 0) return;
    memcpy(out->address[out->count++], text, sizeof text);
}

/* Addresses that name this machine to another one: not loopback, and for
 * IPv6 not link-local (which repeats on every host's interfaces). */
static int names_host(const struct ifaddrs *ifa, int family) {
    if (!ifa->ifa_addr || ifa->ifa_addr->sa_family != family) return 0;
    if (ifa->ifa_flags & IFF_LOOPBACK) return 0;
    if (family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)(const void *)ifa->ifa_addr)->sin6_addr;
        if (IN6_IS_ADDR_LINKLOCAL(a) || IN6_IS_ADDR_LOOPBACK(a)) return 0;
    }
    return 1;
}

void zs__host_addresses_get(zs__host_addresses *out) {
    memset(out, 0, sizeof *out);
    if (gethostname(out->host, sizeof out->host) != 0) out->host[0] = '\0';
    out->host[sizeof out->host - 1] = '\0';
    struct ifaddrs *list = NULL;
    if (getifaddrs(&list) != 0) return;
    /* IPv4 first: what host files, Slurm and mpirun's --host usually name. */
    const int families[2] = {AF_INET, AF_INET6};
    for (int f = 0; f < 2; f++)
        for (const struct ifaddrs *ifa = list; ifa; ifa = ifa->ifa_next)
            if (names_host(ifa, families[f])) add(out, ifa->ifa_addr);
    freeifaddrs(list);
}
