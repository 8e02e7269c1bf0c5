/*
 * webhook_addr.c — where a hook may point (webhook.h webhook_set_policy;
 * docs/scheduler.md --webhook-allow-private): which addresses are
 * private, loopback or the scheduler's own, the check of a URL's host at
 * registration, and the same test for every address curl connects to at
 * delivery (webhook_outbox.c), since DNS may change in between.
 */
#include "scheduler/notify/webhook_int.h"

#include "hf_err.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

/* Is a (an IPv4 address, host order) in net/bits? */
static int in4(uint32_t a, uint32_t net, int bits)
{
    uint32_t mask = bits ? 0xffffffffu << (32 - bits) : 0;
    return (a & mask) == (net & mask);
}

static const char *private4(uint32_t a)
{
    if (in4(a, 0x00000000u, 8)) return "an unspecified address (0.0.0.0/8)";
    if (in4(a, 0x7f000000u, 8)) return "a loopback address (127.0.0.0/8)";
    if (in4(a, 0x0a000000u, 8) || in4(a, 0xac100000u, 12) || in4(a, 0xc0a80000u, 16))
        return "a private address (RFC 1918)";
    if (in4(a, 0x64400000u, 10)) return "a shared address (100.64.0.0/10)";
    if (in4(a, 0xa9fe0000u, 16)) return "a link-local address (169.254.0.0/16)";
    if (in4(a, 0xe0000000u, 4) || a == 0xffffffffu) return "a multicast or broadcast address";
    return NULL;
}

const char *webhook_addr_private(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return private4(ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr));
    if (sa->sa_family != AF_INET6) return "not an IP address";
    const unsigned char *b = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
    static const unsigned char zero[16], mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(b, mapped, 12) == 0 || (memcmp(b, zero, 12) == 0 && (b[12] | b[13] | b[14] | b[15]) && b[15] != 1)) {
        /* IPv4-mapped (::ffff:a.b.c.d) and IPv4-compatible (::a.b.c.d) */
        uint32_t a = (uint32_t)b[12] << 24 | (uint32_t)b[13] << 16 | (uint32_t)b[14] << 8 | b[15];
        return private4(a);
    }
    if (memcmp(b, zero, 16) == 0) return "an unspecified address (::)";
    if (memcmp(b, zero, 15) == 0 && b[15] == 1) return "a loopback address (::1)";
    if ((b[0] & 0xfe) == 0xfc) return "a private address (fc00::/7)";
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) return "a link-local address (fe80::/10)";
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) return "a site-local address (fec0::/10)";
    if (b[0] == 0xff) return "a multicast address";
    return NULL;
}

/* Is sa one of this machine's addresses (its interfaces')? */
static int addr_is_local(const struct sockaddr *sa)
{
    struct ifaddrs *ifs = NULL;
    int hit = 0;
    if (getifaddrs(&ifs)) return 0;
    for (struct ifaddrs *i = ifs; i && !hit; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != sa->sa_family) continue;
        if (sa->sa_family == AF_INET)
            hit = ((const struct sockaddr_in *)sa)->sin_addr.s_addr ==
                  ((const struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
        else if (sa->sa_family == AF_INET6)
            hit = memcmp(&((const struct sockaddr_in6 *)sa)->sin6_addr,
                         &((const struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, 16) == 0;
    }
    freeifaddrs(ifs);
    return hit;
}

static int sa_port(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) return ntohs(((const struct sockaddr_in *)sa)->sin_port);
    if (sa->sa_family == AF_INET6) return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
    return 0;
}

/* webhook_int.h */
const char *webhook_addr_refused(const struct sockaddr *sa, int allow_private, int self_port)
{
    const char *why = webhook_addr_private(sa);
    int local = addr_is_local(sa) || (why && strstr(why, "loopback")) || (why && strstr(why, "unspecified"));
    if (local && self_port > 0 && sa_port(sa) == self_port) return "the scheduler itself";
    if (allow_private) return NULL;
    if (why) return why;
    if (local) return "an address of the scheduler's machine";
    return NULL;
}

void webhook_set_policy(webhook_svc *w, int allow_private, int self_port)
{
    atomic_store(&w->allow_private, allow_private);
    atomic_store(&w->self_port, self_port);
}

int webhook_url_check(webhook_svc *w, const char *url, hf_jerr *e)
{
    CURLU *u = curl_url();
    char *host = NULL, *port = NULL;
    int rc = HF_EINVAL;
    if (!u) return HF_ENOMEM;
    if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK || curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK) {
        hf_jerr_set(e, "url", NULL, "cannot parse the URL's host");
        goto end;
    }
    if (curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) != CURLUE_OK) {
        hf_jerr_set(e, "url", NULL, "cannot parse the URL's port");
        goto end;
    }
    size_t hl = strlen(host);
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {   /* [v6] */
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = 0;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int g = getaddrinfo(host, port, &hints, &res);
    if (g) {
        hf_jerr_set(e, "url", NULL, "cannot resolve host \"%s\": %s", host, gai_strerror(g));
        goto end;
    }
    rc = 0;
    for (struct addrinfo *i = res; i && rc == 0; i = i->ai_next) {
        const char *why = webhook_addr_refused(i->ai_addr, atomic_load(&w->allow_private), atomic_load(&w->self_port));
        if (why) {
            rc = HF_EINVAL;
            hf_jerr_set(e, "url", NULL, "host \"%s\" is %s: webhooks may not target it%s", host, why,
                        strcmp(why, "the scheduler itself") == 0 ? ""
                                                                 : " (the operator may allow it: --webhook-allow-private)");
        }
    }
    freeaddrinfo(res);
end:
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(u);
    return rc;
}
