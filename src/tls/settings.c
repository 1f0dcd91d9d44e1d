/* SPDX-License-Identifier: BSD-2-Clause */
/* The TLS module's settings (umbra/tls.h): the certificates TLS listeners serve,
 * tls = { { hosts = {...}, cert = "F", key = "F" }, ..., protocols = {...}, ciphers = "...",
 * ciphersuites = "...", default = "HOST" }. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "umbra/settings.h"
#include "umbra/tls.h"
#include "acme.h"

#define PATH_LEN UM_SETTINGS_PATH_LEN

/* tls = { ENTRY, ..., protocols = ..., ... }: the named keys, and an entry's. */
static const char *const tls_keys[] = {"protocols", "ciphers", "ciphersuites", "default",
                                        "acme",      NULL};
static const char *const cert_keys[] = {"hosts", "cert", "key", "acme", NULL};
/* In the order of the UM_TLS_PROTO_* bits. */
static const char *const TLS_PROTOCOLS[] = {"TLSv1.2", "TLSv1.3", NULL};

/* The file name (as written at path) joined to the config's folder. It must be a regular
 * file, following symlinks, but the path is kept as written: a certificate reload re-reads
 * whatever a re-pointed link (certbot's live/) names by then. */
static bool resolve_tls_file(struct um_settings_load *ld, lua_State *L, const char *path,
                             const char *name, char **out)
{
    char *joined = um_settings_dir_join(ld, name);
    struct stat st;
    bool ok = true;
    if (stat(joined, &st) != 0)
        ok = errno == ENOENT
                 ? um_settings_fail(ld, L, path, "%s: no such file '%s' (looked for %s)", path,
                                    name, joined)
                 : um_settings_fail(ld, L, path, "%s: cannot use file '%s' (%s): %s", path, name,
                                    joined, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        ok = um_settings_fail(ld, L, path, "%s: '%s' is not a regular file", path, joined);
    if (!ok) {
        free(joined);
        return false;
    }
    *out = joined;
    return true;
}

/* The host name s of a certificate entry, at path: a DNS name, or "*." and a DNS name. */
static bool check_tls_host(struct um_settings_load *ld, lua_State *L, const char *path,
                           const char *s)
{
    const char *base = strncmp(s, "*.", 2) == 0 ? s + 2 : s;
    size_t n = strlen(base);
    if (strchr(base, '*') != NULL)
        return um_settings_fail(ld, L, path,
                                "%s: bad name '%s' (a wildcard is only allowed as the whole "
                                "left-most label, e.g. \"*.example.com\")",
                                path, s);
    if (!um_settings_is_host_name(base, n))
        return um_settings_fail(ld, L, path, "%s: bad host name '%s'", path, s);
    if (base == s && strspn(s, "0123456789.") == n)
        return um_settings_fail(ld, L, path,
                                "%s: '%s' is an IP address, and clients send no name (SNI) "
                                "for those: tls.default picks the certificate they get",
                                path, s);
    return true;
}

/* The entry that lists host already, or -1. */
static int tls_host_owner(const struct um_tls_conf *tc, size_t upto, const char *host)
{
    for (size_t i = 0; i <= upto && i < tc->num_certs; i++)
        for (size_t j = 0; j < tc->certs[i].num_hosts; j++)
            if (strcmp(tc->certs[i].hosts[j], host) == 0) return (int)i;
    return -1;
}

/* hosts = "NAME" or { "NAME", ... } of the entry at idx (entry number i). */
static bool load_tls_hosts(struct um_settings_load *ld, lua_State *L, int idx, const char *cpath,
                           size_t i, struct um_tls_conf *tc, struct um_tls_cert_conf *cc)
{
    char sub[PATH_LEN], el[PATH_LEN], other[PATH_LEN];
    const char *s;
    size_t n = 1;
    um_settings_subpath(sub, sizeof sub, cpath, "hosts");
    int t = um_settings_get_field(L, idx, "hosts");
    if (t == LUA_TNIL)
        return um_settings_fail(ld, L, sub,
                                "%s: missing (the names this certificate serves, e.g. hosts = "
                                "{ \"example.com\", \"*.example.com\" })",
                                sub);
    if (t != LUA_TSTRING && t != LUA_TTABLE)
        return um_settings_fail(ld, L, sub, "%s: expected a list of host names, got %s", sub,
                                lua_typename(L, t));
    int hidx = lua_gettop(L);
    if (t == LUA_TTABLE) {
        if (!um_settings_check_list(ld, L, hidx, sub, &n)) return false;
        if (n == 0) return um_settings_fail(ld, L, sub, "%s: expected at least one host name", sub);
    }
    cc->hosts = um_calloc(n, sizeof *cc->hosts);
    for (size_t j = 0; j < n; j++) {
        if (t == LUA_TTABLE) {
            um_settings_subpath_i(el, sizeof el, sub, j + 1);
            lua_rawgeti(L, hidx, (int)j + 1);
        } else {
            snprintf(el, sizeof el, "%s", sub);
            lua_pushvalue(L, hidx);
        }
        if (!um_settings_get_string(ld, L, -1, el, "a host name such as \"example.com\"", &s) ||
            !check_tls_host(ld, L, el, s))
            return false;
        char *host = um_strndup(s, strlen(s));
        um_settings_lower(host);
        int owner = tls_host_owner(tc, i, host);
        if (owner >= 0) {
            um_settings_subpath_i(other, sizeof other, "tls", (size_t)owner + 1);
            bool ok =
                (size_t)owner == i
                    ? um_settings_fail(ld, L, el, "%s: '%s' is listed twice", el, s)
                    : um_settings_fail(ld, L, el, "%s: '%s' is already listed in %s", el, s, other);
            free(host);
            return ok;
        }
        cc->hosts[cc->num_hosts++] = host;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return true;
}

/* The rest of an entry with acme = true (at idx): no files of its own, a CA in tls.acme
 * (read before the entries), names the CA can check (no wildcard: that needs dns-01). */
static bool acme_entry(struct um_settings_load *ld, lua_State *L, int idx, const char *cpath,
                       const struct um_tls_conf *tc, struct um_tls_cert_conf *cc)
{
    char sub[PATH_LEN];
    static const char *const files[] = {"cert", "key"};
    for (size_t k = 0; k < 2; k++) {
        um_settings_subpath(sub, sizeof sub, cpath, files[k]);
        int t = um_settings_get_field(L, idx, files[k]);
        lua_pop(L, 1);
        if (t != LUA_TNIL)
            return um_settings_fail(ld, L, sub,
                                    "%s: an entry with acme = true gets its certificate and key "
                                    "from the CA: remove %s, or acme",
                                    sub, files[k]);
    }
    um_settings_subpath(sub, sizeof sub, cpath, "acme");
    if (tc->acme.directory == NULL)
        return um_settings_fail(ld, L, sub,
                                "%s: acme = true needs a CA: add tls.acme = { directory = "
                                "\"https://...\", email = \"...\", storage = \"DIR\" }",
                                sub);
    for (size_t j = 0; j < cc->num_hosts; j++)
        if (cc->hosts[j][0] == '*')
            return um_settings_fail(ld, L, sub,
                                    "%s: '%s' is a wildcard, which ACME issues only by dns-01 "
                                    "challenges (not supported): list the names",
                                    sub, cc->hosts[j]);
    size_t n = strlen(tc->acme.storage) + strlen(cc->hosts[0]) + 6;
    cc->cert = um_malloc(n);
    cc->key = um_malloc(n);
    snprintf(cc->cert, n, "%s/%s.crt", tc->acme.storage, cc->hosts[0]);
    snprintf(cc->key, n, "%s/%s.key", tc->acme.storage, cc->hosts[0]);
    return true;
}

/* Entry number i (tls[i + 1]) at idx: { hosts = {...}, cert = "F", key = "F" }. */
static bool load_tls_cert(struct um_settings_load *ld, lua_State *L, int idx, const char *cpath,
                          size_t i, struct um_tls_conf *tc, struct um_tls_cert_conf *cc)
{
    char sub[PATH_LEN];
    const char *cert_name, *key_name;
    if (lua_type(L, idx) != LUA_TTABLE)
        return um_settings_fail(
            ld, L, cpath,
            "%s: expected a certificate entry such as { hosts = { "
            "\"example.com\" }, cert = \"example.crt\", key = \"example.key\" }, got %s",
            cpath, lua_typename(L, lua_type(L, idx)));
    if (!um_settings_check_keys(ld, L, idx, cpath, cert_keys)) return false;
    cc->line = um_settings_line_of(ld, L, cpath);
    if (!load_tls_hosts(ld, L, idx, cpath, i, tc, cc)) return false;
    um_settings_subpath(sub, sizeof sub, cpath, "acme");
    if (!um_settings_opt_bool(ld, L, idx, sub, "acme", &cc->acme, NULL)) return false;
    if (cc->acme) return acme_entry(ld, L, idx, cpath, tc, cc);

    static const char *const files[] = {"cert", "key"};
    static const char *const what[] = {"a PEM certificate chain file", "a PEM key file"};
    char **outs[] = {&cc->cert, &cc->key};
    char **texts[] = {&cc->cert_name, &cc->key_name};
    int *lines[] = {&cc->cert_line, &cc->key_line};
    const char **names[] = {&cert_name, &key_name};
    for (size_t k = 0; k < 2; k++) {
        um_settings_subpath(sub, sizeof sub, cpath, files[k]);
        if (um_settings_get_field(L, idx, files[k]) == LUA_TNIL)
            return um_settings_fail(ld, L, sub, "%s: missing (%s, relative to the config's folder)",
                                    sub, what[k]);
        if (!um_settings_get_string(ld, L, -1, sub, what[k], names[k]) ||
            !resolve_tls_file(ld, L, sub, *names[k], outs[k]))
            return false;
        /* For the TLS module's check of the pair after the load (um_tls_check_config). */
        *texts[k] = um_strndup(*names[k], strlen(*names[k]));
        *lines[k] = um_settings_line_of(ld, L, sub);
        lua_pop(L, 1);
    }
    return true;
}

/* protocols = "TLSv1.3" or a list of them, of the tls table at idx. */
static bool load_tls_protocols(struct um_settings_load *ld, lua_State *L, int idx,
                               struct um_tls_conf *tc)
{
    char el[PATH_LEN];
    const char *s;
    size_t n = 1;
    int t = um_settings_get_field(L, idx, "protocols");
    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        return true;
    }
    if (t != LUA_TSTRING && t != LUA_TTABLE)
        return um_settings_fail(ld, L, "tls.protocols",
                                "tls.protocols: expected a list such as { "
                                "\"TLSv1.2\", \"TLSv1.3\" }, got %s",
                                lua_typename(L, t));
    int pidx = lua_gettop(L);
    if (t == LUA_TTABLE) {
        if (!um_settings_check_list(ld, L, pidx, "tls.protocols", &n)) return false;
        if (n == 0)
            return um_settings_fail(ld, L, "tls.protocols",
                                    "tls.protocols: expected at least one of: %s",
                                    um_settings_join(L, TLS_PROTOCOLS));
    }
    tc->protocols = 0;
    for (size_t j = 0; j < n; j++) {
        if (t == LUA_TTABLE) {
            um_settings_subpath_i(el, sizeof el, "tls.protocols", j + 1);
            lua_rawgeti(L, pidx, (int)j + 1);
        } else {
            snprintf(el, sizeof el, "tls.protocols");
            lua_pushvalue(L, pidx);
        }
        if (!um_settings_get_string(ld, L, -1, el, "\"TLSv1.2\" or \"TLSv1.3\"", &s)) return false;
        size_t k = 0;
        while (TLS_PROTOCOLS[k] != NULL && strcmp(TLS_PROTOCOLS[k], s) != 0)
            k++;
        if (TLS_PROTOCOLS[k] == NULL)
            return um_settings_fail(ld, L, el,
                                    "%s: unknown protocol '%s' (expected one of: %s; older "
                                    "versions are not supported)",
                                    el, s, um_settings_join(L, TLS_PROTOCOLS));
        if (tc->protocols & (1u << k))
            return um_settings_fail(ld, L, el, "%s: '%s' is listed twice", el, s);
        tc->protocols |= 1u << k;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return true;
}

/* ciphers / ciphersuites of the tls table at idx. */
static bool load_tls_ciphers(struct um_settings_load *ld, lua_State *L, int idx, const char *key,
                             bool tls13, char **out, int *line)
{
    char sub[PATH_LEN];
    const char *s;
    um_settings_subpath(sub, sizeof sub, "tls", key);
    if (um_settings_get_field(L, idx, key) != LUA_TNIL) {
        if (!um_settings_get_string(
                ld, L, -1, sub, tls13 ? "a TLS 1.3 ciphersuite list" : "a TLS 1.2 cipher list", &s))
            return false;
        /* OpenSSL checks the names after the load (um_tls_check_config). */
        *out = um_strndup(s, strlen(s));
        *line = um_settings_line_of(ld, L, sub);
    }
    lua_pop(L, 1);
    return true;
}

/* A listener with tls = true needs certificates. */
static bool check(struct um_settings_load *ld, lua_State *L, const struct um_config *c,
                  const void *part)
{
    const struct um_tls_conf *tc = part;
    char sub[PATH_LEN], el[PATH_LEN];
    if (tc->num_certs > 0) return true;
    for (size_t i = 0; i < c->num_listen; i++) {
        if (!c->listen[i].tls) continue;
        um_settings_subpath_i(sub, sizeof sub, "listen", i + 1);
        um_settings_subpath(el, sizeof el, sub, "tls");
        return um_settings_fail(ld, L, el,
                                "%s: tls = true needs certificates: add a setting tls = { { "
                                "hosts = { \"example.com\" }, cert = \"example.crt\", key = "
                                "\"example.key\" } }",
                                sub);
    }
    return true;
}

/* tls = { { hosts = {...}, cert = "F", key = "F" }, ..., protocols = {...}, ciphers = "...",
 * ciphersuites = "...", default = "HOST" }. */
static bool read(struct um_settings_load *ld, lua_State *L, int idx, const char *name, void *part)
{
    struct um_tls_conf *tc = part;
    char key[128], sub[PATH_LEN];
    const char *s;
    (void)name;
    int t = lua_type(L, idx);
    if (t != LUA_TTABLE)
        return um_settings_fail(
            ld, L, "tls",
            "tls: expected a list of certificate entries such as { { "
            "hosts = { \"example.com\" }, cert = \"example.crt\", key = \"example.key\" "
            "} }, got %s",
            lua_typename(L, t));
    tc->line = um_settings_line_of(ld, L, "tls");

    /* Entries at 1..n, the options by name. */
    size_t n = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) == LUA_TNUMBER) n++;
    }
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        int kt = lua_type(L, -1);
        if (kt == LUA_TSTRING && um_settings_in_list(tls_keys, lua_tostring(L, -1))) continue;
        if (kt == LUA_TNUMBER) {
            double d = lua_tonumber(L, -1);
            if (d >= 1 && d <= (double)n && d == floor(d)) continue;
        }
        um_settings_key_text(L, -1, key, sizeof key);
        um_settings_subpath(sub, sizeof sub, "tls", key);
        if (kt == LUA_TSTRING)
            return um_settings_fail(ld, L, sub,
                                    "tls: unknown key '%s' (expected certificate entries and: "
                                    "%s)",
                                    key, um_settings_join(L, tls_keys));
        return um_settings_fail(ld, L, sub,
                                "tls: expected a list of certificate entries without holes "
                                "(found index %s)",
                                key);
    }
    /* tls.acme first: the entries with acme = true need its storage. */
    if (um_settings_get_field(L, idx, "acme") != LUA_TNIL &&
        !um__tls_acme_read(ld, L, lua_gettop(L), &tc->acme))
        return false;
    lua_pop(L, 1);
    if (n == 0)
        return um_settings_fail(
            ld, L, "tls",
            "tls: expected at least one certificate entry such as { "
            "hosts = { \"example.com\" }, cert = \"example.crt\", key = \"example.key\" "
            "}");
    tc->certs = um_calloc(n, sizeof *tc->certs);
    for (size_t i = 0; i < n; i++) {
        um_settings_subpath_i(sub, sizeof sub, "tls", i + 1);
        lua_rawgeti(L, idx, (int)i + 1);
        tc->num_certs++; /* so that config_free frees what the entry got so far */
        if (!load_tls_cert(ld, L, lua_gettop(L), sub, i, tc, &tc->certs[i])) return false;
        lua_pop(L, 1);
    }

    if (!load_tls_protocols(ld, L, idx, tc) ||
        !load_tls_ciphers(ld, L, idx, "ciphers", false, &tc->ciphers, &tc->ciphers_line) ||
        !load_tls_ciphers(ld, L, idx, "ciphersuites", true, &tc->ciphersuites,
                          &tc->ciphersuites_line))
        return false;

    if (um_settings_get_field(L, idx, "default") != LUA_TNIL) {
        if (!um_settings_get_string(ld, L, -1, "tls.default", "one of the hosts of the entries",
                                    &s))
            return false;
        char *host = um_strndup(s, strlen(s));
        um_settings_lower(host);
        int owner = tls_host_owner(tc, tc->num_certs, host);
        free(host);
        if (owner < 0)
            return um_settings_fail(ld, L, "tls.default",
                                    "tls.default: '%s' is not among the hosts of "
                                    "the entries",
                                    s);
        tc->default_cert = (size_t)owner;
    }
    lua_pop(L, 1);
    return true;
}

static void defaults(void *part)
{
    ((struct um_tls_conf *)part)->protocols = UM_TLS_PROTO_TLS12 | UM_TLS_PROTO_TLS13;
}

static void dispose(void *part)
{
    struct um_tls_conf *tc = part;
    for (size_t i = 0; i < tc->num_certs; i++) {
        struct um_tls_cert_conf *cc = &tc->certs[i];
        for (size_t j = 0; j < cc->num_hosts; j++)
            free(cc->hosts[j]);
        free(cc->hosts);
        free(cc->cert);
        free(cc->key);
        free(cc->cert_name);
        free(cc->key_name);
    }
    free(tc->certs);
    um__tls_acme_dispose(&tc->acme);
    free(tc->ciphers);
    free(tc->ciphersuites);
}

static const struct um_settings_table tables[] = {
    {"tls", tls_keys}, {"tls[N]", cert_keys}, {"tls.acme", um__tls_acme_keys}, {NULL, NULL}};

static unsigned index_in_list;

const struct um_settings um_tls_settings = {
    .index = &index_in_list,
    .global = "tls",
    .size = sizeof(struct um_tls_conf),
    .defaults = defaults,
    .read = read,
    .dispose = dispose,
    .check = check,
    .tables = tables,
};
