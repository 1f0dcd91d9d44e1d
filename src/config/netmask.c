/* SPDX-License-Identifier: BSD-2-Clause */
/* Addresses and networks ("10.0.0.0/8", "::1") of the allow lists (cache.purge.allow,
 * admin.allow), and matching a client's address against them. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Whether the first prefix bits of a and b (16 or 4 bytes) are equal. */
static bool prefix_equal(const unsigned char *a, const unsigned char *b, int prefix)
{
    size_t full = (size_t)prefix / 8;
    int rest = prefix % 8;
    if (memcmp(a, b, full) != 0)
        return false;
    if (rest == 0)
        return true;
    unsigned mask = (0xffu << (8 - rest)) & 0xffu;
    return (a[full] & mask) == (b[full] & mask);
}

bool um_netmask_match(const struct um_netmask *m, size_t n, const struct sockaddr *sa)
{
    unsigned char v4[4], v6[16];
    bool has_v4 = false;
    if (sa == NULL)
        return false;
    if (sa->sa_family == AF_INET) {
        struct sockaddr_in sin;
        memcpy(&sin, sa, sizeof sin);
        memcpy(v4, &sin.sin_addr, 4);
        has_v4 = true;
        /* ::ffff:a.b.c.d, for the IPv6 entries */
        memset(v6, 0, 10);
        v6[10] = v6[11] = 0xff;
        memcpy(v6 + 12, v4, 4);
    } else if (sa->sa_family == AF_INET6) {
        struct sockaddr_in6 sin6;
        memcpy(&sin6, sa, sizeof sin6);
        memcpy(v6, &sin6.sin6_addr, 16);
        if (IN6_IS_ADDR_V4MAPPED(&sin6.sin6_addr)) {
            memcpy(v4, v6 + 12, 4);
            has_v4 = true;
        }
    } else {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (m[i].family == AF_INET && has_v4 && m[i].prefix >= 0 && m[i].prefix <= 32 &&
            prefix_equal(v4, m[i].addr, m[i].prefix))
            return true;
        if (m[i].family == AF_INET6 && m[i].prefix >= 0 && m[i].prefix <= 128 &&
            prefix_equal(v6, m[i].addr, m[i].prefix))
            return true;
    }
    return false;
}

#define NETMASK_HINT                                                                     \
    "expected an IPv4 or IPv6 address, or a network such as \"10.0.0.0/8\" or \"fd00::/8\""

bool um_netmask_match_text(const struct um_netmask *m, size_t n, const char *ip)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    if (inet_pton(AF_INET, ip, &((struct sockaddr_in *)&ss)->sin_addr) == 1)
        ss.ss_family = AF_INET;
    else if (inet_pton(AF_INET6, ip, &((struct sockaddr_in6 *)&ss)->sin6_addr) == 1)
        ss.ss_family = AF_INET6;
    else
        return false;
    return um_netmask_match(m, n, (const struct sockaddr *)&ss);
}

/* Parses "ADDRESS" or "ADDRESS/PREFIX" (IPv4 or IPv6, without brackets), at path. */
bool um_settings_parse_netmask(struct um_settings_load *ld, lua_State *L, const char *path,
                               const char *text, struct um_netmask *out)
{
    char host[INET6_ADDRSTRLEN], net[INET6_ADDRSTRLEN];
    const char *slash = strchr(text, '/');
    size_t hl = slash != NULL ? (size_t)(slash - text) : strlen(text);
    memset(out, 0, sizeof *out);
    if (hl == 0 || hl >= sizeof host)
        return um_settings_fail(ld, L, path, "%s: bad address '%s' (" NETMASK_HINT ")", path, text);
    memcpy(host, text, hl);
    host[hl] = '\0';
    bool v6 = strchr(host, ':') != NULL;
    int max = v6 ? 128 : 32;
    out->family = v6 ? AF_INET6 : AF_INET;
    if (inet_pton(out->family, host, out->addr) != 1)
        return um_settings_fail(ld, L, path, "%s: bad %s address '%s' (" NETMASK_HINT ")", path,
                                v6 ? "IPv6" : "IPv4", text);
    out->prefix = max;
    if (slash != NULL) {
        const char *p = slash + 1;
        int prefix = 0;
        size_t digits = 0;
        for (; *p >= '0' && *p <= '9' && digits < 4; p++, digits++)
            prefix = prefix * 10 + (*p - '0');
        if (digits == 0 || *p != '\0' || prefix > max)
            return um_settings_fail(
                ld, L, path, "%s: bad prefix length in '%s' (expected /0 to /%d)", path, text, max);
        out->prefix = prefix;
    }
    /* "10.0.0.1/8" is almost certainly a typo for one address or for its network. */
    unsigned char masked[16] = {0};
    size_t full = (size_t)out->prefix / 8;
    memcpy(masked, out->addr, full);
    if (out->prefix % 8 != 0)
        masked[full] = (unsigned char)(out->addr[full] & (0xffu << (8 - out->prefix % 8)));
    if (memcmp(masked, out->addr, v6 ? 16 : 4) != 0) {
        if (inet_ntop(out->family, masked, net, sizeof net) == NULL)
            snprintf(net, sizeof net, "?");
        return um_settings_fail(ld, L, path,
                                "%s: '%s' has address bits set beyond the /%d prefix (the "
                                "network is %s/%d; for the one address, leave out the prefix)",
                                path, text, out->prefix, net, out->prefix);
    }
    return true;
}

bool um_settings_netmask_list(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                              struct um_netmask **out, size_t *num)
{
    char el[PATH_LEN];
    const char *s;
    size_t n = 1;
    int t = lua_type(L, idx);
    if (t != LUA_TSTRING && t != LUA_TTABLE)
        return um_settings_fail(ld, L, path,
                                "%s: expected a list of addresses or networks such as "
                                "{ \"127.0.0.1\", \"10.0.0.0/8\" }, got %s",
                                path, lua_typename(L, t));
    if (t == LUA_TTABLE && !um_settings_check_list(ld, L, idx, path, &n)) return false;
    free(*out);
    *out = n > 0 ? um_calloc(n, sizeof **out) : NULL;
    *num = 0;
    for (size_t i = 0; i < n; i++) {
        if (t == LUA_TTABLE) {
            um_settings_subpath_i(el, sizeof el, path, i + 1);
            lua_rawgeti(L, idx, (int)i + 1);
        } else {
            snprintf(el, sizeof el, "%s", path);
            lua_pushvalue(L, idx);
        }
        struct um_netmask *m = &(*out)[i];
        if (!um_settings_get_string(ld, L, -1, el, "an address or a network such as \"10.0.0.0/8\"",
                                    &s) ||
            !um_settings_parse_netmask(ld, L, el, s, m))
            return false;
        for (size_t j = 0; j < i; j++)
            if ((*out)[j].family == m->family && (*out)[j].prefix == m->prefix &&
                memcmp((*out)[j].addr, m->addr, sizeof m->addr) == 0)
                return um_settings_fail(ld, L, el, "%s: '%s' is listed twice", el, s);
        (*num)++;
        lua_pop(L, 1);
    }
    return true;
}
