/* SPDX-License-Identifier: BSD-2-Clause */
/* The TLS module's tls.acme settings (umbra/tls.h): the CA an entry with acme = true gets
 * its certificate from, tls.acme = { directory = "URL", email = "...", storage = "DIR",
 * ca_file = "F", renew_before = "30d", challenges = { "http-01", "tls-alpn-01" } }. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "umbra/settings.h"
#include "umbra/tls.h"
#include "acme.h"

#define PATH_LEN UM_SETTINGS_PATH_LEN

const char *const um__tls_acme_keys[] = {"directory", "email",        "storage",
                                         "ca_file",   "renew_before", "challenges",
                                         NULL};
/* In the order of the UM_TLS_ACME_* bits. */
static const char *const CHALLENGES[] = {"http-01", "tls-alpn-01", NULL};

bool um_tls_parse_duration(const char *s, double *out)
{
    static const struct {
        char unit;
        double seconds;
    } units[] = {{'s', 1}, {'m', 60}, {'h', 3600}, {'d', 86400}};
    if (s == NULL || !(*s >= '0' && *s <= '9'))
        return false;
    double v = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        v = v * 10 + (*s - '0');
        if (v > 1e9)
            return false; /* 30 years in seconds is below this */
    }
    double mult = 1;
    if (*s != '\0') {
        size_t k = 0;
        while (k < UM_NELEMS(units) && units[k].unit != *s)
            k++;
        if (k == UM_NELEMS(units) || s[1] != '\0')
            return false;
        mult = units[k].seconds;
    }
    if (v <= 0)
        return false;
    *out = v * mult;
    return true;
}

/* A string at key of the table at idx into *out (a copy); required: fail when missing. */
static bool get_str(struct um_settings_load *ld, lua_State *L, int idx, const char *key,
                    const char *what, bool required, char **out, int *line)
{
    char sub[PATH_LEN];
    const char *s;
    um_settings_subpath(sub, sizeof sub, "tls.acme", key);
    if (um_settings_get_field(L, idx, key) == LUA_TNIL) {
        lua_pop(L, 1);
        return !required || um_settings_fail(ld, L, sub, "%s: missing (%s)", sub, what);
    }
    if (!um_settings_get_string(ld, L, -1, sub, what, &s))
        return false;
    *out = um_strndup(s, strlen(s));
    if (line != NULL)
        *line = um_settings_line_of(ld, L, sub);
    lua_pop(L, 1);
    return true;
}

static bool read_challenges(struct um_settings_load *ld, lua_State *L, int idx,
                            struct um_tls_acme_conf *ac)
{
    const char *path = "tls.acme.challenges";
    char el[PATH_LEN];
    const char *s;
    size_t n = 1;
    int t = um_settings_get_field(L, idx, "challenges");
    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        return true;
    }
    if (t != LUA_TSTRING && t != LUA_TTABLE)
        return um_settings_fail(ld, L, path,
                                "%s: expected a list such as { \"http-01\", \"tls-alpn-01\" }, "
                                "got %s",
                                path, lua_typename(L, t));
    int cidx = lua_gettop(L);
    if (t == LUA_TTABLE) {
        if (!um_settings_check_list(ld, L, cidx, path, &n))
            return false;
        if (n == 0)
            return um_settings_fail(ld, L, path, "%s: expected at least one of: %s", path,
                                    um_settings_join(L, CHALLENGES));
    }
    ac->challenges = 0;
    for (size_t j = 0; j < n; j++) {
        if (t == LUA_TTABLE) {
            um_settings_subpath_i(el, sizeof el, path, j + 1);
            lua_rawgeti(L, cidx, (int)j + 1);
        } else {
            snprintf(el, sizeof el, "%s", path);
            lua_pushvalue(L, cidx);
        }
        if (!um_settings_get_string(ld, L, -1, el, "\"http-01\" or \"tls-alpn-01\"", &s))
            return false;
        size_t k = 0;
        while (CHALLENGES[k] != NULL && strcmp(CHALLENGES[k], s) != 0)
            k++;
        if (CHALLENGES[k] == NULL)
            return um_settings_fail(ld, L, el, "%s: unknown challenge '%s' (expected one of: %s)",
                                    el, s, um_settings_join(L, CHALLENGES));
        if (ac->challenges & (1u << k))
            return um_settings_fail(ld, L, el, "%s: '%s' is listed twice", el, s);
        ac->challenges |= 1u << k;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return true;
}

bool um__tls_acme_read(struct um_settings_load *ld, lua_State *L, int idx,
                       struct um_tls_acme_conf *ac)
{
    const char *path = "tls.acme";
    char *storage = NULL;
    if (lua_type(L, idx) != LUA_TTABLE)
        return um_settings_fail(ld, L, path,
                                "%s: expected a table such as { directory = \"https://...\", "
                                "email = \"ops@example.com\", storage = \"/var/lib/umbra/acme\" "
                                "}, got %s",
                                path, lua_typename(L, lua_type(L, idx)));
    if (!um_settings_check_keys(ld, L, idx, path, um__tls_acme_keys))
        return false;
    ac->line = um_settings_line_of(ld, L, path);
    ac->challenges = UM_TLS_ACME_HTTP01;
    if (!get_str(ld, L, idx, "directory", "the CA's directory URL, e.g. "
                 "\"https://acme-v02.api.letsencrypt.org/directory\"", true, &ac->directory, NULL))
        return false;
    if (strncmp(ac->directory, "https://", 8) != 0 && strncmp(ac->directory, "http://", 7) != 0)
        return um_settings_fail(ld, L, "tls.acme.directory",
                                "tls.acme.directory: '%s' is not an http(s):// URL",
                                ac->directory);
    if (!get_str(ld, L, idx, "email", "a contact address", false, &ac->email, NULL))
        return false;
    if (ac->email != NULL && (strchr(ac->email, '@') == NULL || strpbrk(ac->email, " ,<>\"")))
        return um_settings_fail(ld, L, "tls.acme.email", "tls.acme.email: '%s' is not an e-mail "
                                "address", ac->email);
    if (!get_str(ld, L, idx, "storage", "the folder where the account key and the certificates "
                 "are kept, e.g. \"/var/lib/umbra/acme\"", true, &storage, &ac->storage_line))
        return false;
    bool ok = um_settings_resolve_path(ld, L, "tls.acme.storage", storage, true, &ac->storage);
    free(storage);
    if (!ok)
        return false;
    char *ca = NULL;
    if (!get_str(ld, L, idx, "ca_file", "a PEM file of CA certificates", false, &ca, NULL))
        return false;
    if (ca != NULL) {
        ok = um_settings_resolve_path(ld, L, "tls.acme.ca_file", ca, false, &ac->ca_file);
        free(ca);
        if (!ok)
            return false;
    }
    int t = um_settings_get_field(L, idx, "renew_before");
    if (t != LUA_TNIL) {
        double d = 0;
        bool good = t == LUA_TNUMBER ? (d = lua_tonumber(L, -1)) > 0
                                     : t == LUA_TSTRING &&
                                           um_tls_parse_duration(lua_tostring(L, -1), &d);
        if (!good)
            return um_settings_fail(ld, L, "tls.acme.renew_before",
                                    "tls.acme.renew_before: expected a duration such as \"30d\", "
                                    "\"12h\", \"90m\" or a number of seconds");
        ac->renew_before = d;
    }
    lua_pop(L, 1);
    return read_challenges(ld, L, idx, ac);
}

void um__tls_acme_dispose(struct um_tls_acme_conf *ac)
{
    free(ac->directory);
    free(ac->email);
    free(ac->storage);
    free(ac->ca_file);
}
