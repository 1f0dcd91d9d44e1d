/* SPDX-License-Identifier: BSD-2-Clause */
/* cluster = { self = "IP:PORT", peers = { "IP:PORT", ... }, secret = "..." }: the nodes of
 * a ring of Umbra servers (umbra/cluster.h). Every node lists the same peers (itself
 * included) and the same secret; self says which of them this node is. Peers are IP
 * addresses (no names: a ring must not depend on a resolver to find its own members). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "umbra/cluster.h"
#include "umbra/settings.h"

#define PATH_LEN UM_SETTINGS_PATH_LEN

static const char *const keys[] = {"self", "peers", "secret", NULL};

#define SECRET_MIN 16
#define PEERS_MAX 1024

/* "IPv4:PORT" or "[IPv6]:PORT" into out (url "http://..." owned by out). */
static bool parse_peer(struct um_settings_load *ld, lua_State *L, const char *path,
                       const char *text, struct um_upstream_server *out)
{
    char host[64];
    const char *colon;
    bool v6 = text[0] == '[';
    if (v6) {
        const char *close = strchr(text, ']');
        if (close == NULL || close[1] != ':' || (size_t)(close - text - 1) >= sizeof host) goto bad;
        memcpy(host, text + 1, (size_t)(close - text - 1));
        host[close - text - 1] = '\0';
        colon = close + 1;
    } else {
        colon = strrchr(text, ':');
        if (colon == NULL || colon == text || (size_t)(colon - text) >= sizeof host) goto bad;
        memcpy(host, text, (size_t)(colon - text));
        host[colon - text] = '\0';
    }
    unsigned long port = 0;
    size_t digits = 0;
    const char *p = colon + 1;
    for (; *p >= '0' && *p <= '9' && digits < 6; p++, digits++)
        port = port * 10 + (unsigned long)(*p - '0');
    if (digits == 0 || *p != '\0' || port == 0 || port > 65535) goto bad;
    memset(&out->addr, 0, sizeof out->addr);
    if (v6) {
        struct sockaddr_in6 *sa = (struct sockaddr_in6 *)&out->addr;
        if (inet_pton(AF_INET6, host, &sa->sin6_addr) != 1) goto bad;
        sa->sin6_family = AF_INET6;
        sa->sin6_port = htons((uint16_t)port);
        out->addrlen = sizeof *sa;
    } else {
        struct sockaddr_in *sa = (struct sockaddr_in *)&out->addr;
        if (inet_pton(AF_INET, host, &sa->sin_addr) != 1) goto bad;
        sa->sin_family = AF_INET;
        sa->sin_port = htons((uint16_t)port);
        out->addrlen = sizeof *sa;
    }
    size_t n = strlen(text) + 8;
    out->url = malloc(n);
    if (out->url == NULL) return um_settings_fail(ld, L, path, "%s: out of memory", path);
    snprintf(out->url, n, "http://%s", text);
    out->https = false;
    return true;
bad:
    return um_settings_fail(ld, L, path,
                            "%s: bad peer address '%s' (expected \"IP:PORT\" or \"[IPv6]:PORT\", "
                            "an address, not a name, and a port from 1 to 65535)",
                            path, text);
}

static bool read(struct um_settings_load *ld, lua_State *L, int idx, const char *name, void *part)
{
    struct um_cluster_conf *cc = part;
    (void)name;
    int t = lua_type(L, idx);
    if (t != LUA_TTABLE)
        return um_settings_fail(
            ld, L, "cluster",
            "cluster: expected a table such as { self = \"10.0.0.1:80\", peers "
            "= { \"10.0.0.1:80\", \"10.0.0.2:80\" }, secret = \"...\" }, got %s",
            lua_typename(L, t));
    cc->line = um_settings_line_of(ld, L, "cluster");
    if (!um_settings_check_keys(ld, L, idx, "cluster", keys)) return false;
    char path[PATH_LEN];

    if (um_settings_get_field(L, idx, "peers") != LUA_TTABLE)
        return um_settings_fail(ld, L, "cluster.peers",
                                "cluster.peers: expected the list of every node's \"IP:PORT\", "
                                "this one included");
    int pidx = lua_gettop(L);
    size_t n;
    if (!um_settings_check_list(ld, L, pidx, "cluster.peers", &n)) return false;
    if (n == 0 || n > PEERS_MAX)
        return um_settings_fail(ld, L, "cluster.peers", "cluster.peers: expected 1 to %d peers",
                                PEERS_MAX);
    cc->peers = calloc(n, sizeof(*cc->peers));
    if (cc->peers == NULL)
        return um_settings_fail(ld, L, "cluster.peers", "cluster.peers: out of memory");
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, pidx, (int)i + 1);
        um_settings_subpath_i(path, sizeof path, "cluster.peers", i + 1);
        const char *s;
        if (!um_settings_get_string(ld, L, -1, path, "\"IP:PORT\"", &s)) return false;
        if (!parse_peer(ld, L, path, s, &cc->peers[i])) return false;
        cc->num_peers = i + 1;
        for (size_t j = 0; j < i; j++)
            if (strcmp(cc->peers[j].url, cc->peers[i].url) == 0)
                return um_settings_fail(ld, L, path, "%s: '%s' is listed twice", path, s);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);

    if (um_settings_get_field(L, idx, "self") == LUA_TNIL)
        return um_settings_fail(ld, L, "cluster.self",
                                "cluster.self: missing (which of cluster.peers this node is)");
    const char *self;
    if (!um_settings_get_string(ld, L, -1, "cluster.self", "\"IP:PORT\"", &self)) return false;
    struct um_upstream_server me = {0};
    if (!parse_peer(ld, L, "cluster.self", self, &me)) return false;
    bool found = false;
    for (size_t i = 0; i < cc->num_peers && !found; i++)
        if (strcmp(cc->peers[i].url, me.url) == 0) {
            cc->self = i;
            found = true;
        }
    free(me.url);
    if (!found)
        return um_settings_fail(ld, L, "cluster.self",
                                "cluster.self: '%s' is not one of cluster.peers (list every node, "
                                "this one included, the same way on each)",
                                self);
    lua_pop(L, 1);

    if (um_settings_get_field(L, idx, "secret") == LUA_TNIL)
        return um_settings_fail(ld, L, "cluster.secret",
                                "cluster.secret: missing (the secret every node signs its peer "
                                "requests with, at least %d characters)",
                                SECRET_MIN);
    const char *secret;
    if (!um_settings_get_string(ld, L, -1, "cluster.secret", "a string", &secret)) return false;
    if (strlen(secret) < SECRET_MIN)
        return um_settings_fail(ld, L, "cluster.secret",
                                "cluster.secret: too short (at least %d characters)", SECRET_MIN);
    cc->secret = strdup(secret);
    if (cc->secret == NULL)
        return um_settings_fail(ld, L, "cluster.secret", "cluster.secret: out of memory");
    lua_pop(L, 1);
    cc->enabled = true;
    return true;
}

static void dispose(void *part)
{
    struct um_cluster_conf *cc = part;
    for (size_t i = 0; i < cc->num_peers; i++)
        free(cc->peers[i].url);
    free(cc->peers);
    free(cc->secret);
}

static const struct um_settings_table tables[] = {{"cluster", keys}, {NULL, NULL}};

static unsigned index_in_list;

const struct um_settings um_cluster_settings = {
    .index = &index_in_list,
    .global = "cluster",
    .size = sizeof(struct um_cluster_conf),
    .read = read,
    .dispose = dispose,
    .tables = tables,
};
