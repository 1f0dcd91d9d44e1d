/* SPDX-License-Identifier: BSD-2-Clause */
/* The access module's settings (umbra/access.h): the global `headers`, and a route's
 * `allow`, `deny`, `auth` and `headers`.
 *
 * Ownership: a route's part is a memcpy of the global one (umbra/settings.h), so nothing
 * a part points to may belong to it. Every allocation of a snapshot's access settings,
 * the routes' too, goes on the store the global part made (defaults) and its copies
 * carry; the global part's dispose frees the store, and everything on it, once. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "umbra/access.h"
#include "umbra/config.h"
#include "umbra/httpfield.h"
#include "umbra/settings.h"

#define PATH_LEN UM_SETTINGS_PATH_LEN
#define HTPASSWD_MAX (16u << 20) /* bytes of an htpasswd file, at most */

struct um_access_store {
    void **ptrs;
    size_t n, cap;
};

static void *keep(struct um_access_store *st, void *p)
{
    if (st->n == st->cap) {
        st->cap = st->cap ? st->cap * 2 : 16;
        void **np = realloc(st->ptrs, st->cap * sizeof(*np));
        UM_ASSERT(np != NULL);
        st->ptrs = np;
    }
    st->ptrs[st->n++] = p;
    return p;
}

static void *store_calloc(struct um_access_store *st, size_t n, size_t size)
{
    return keep(st, um_calloc(n ? n : 1, size));
}

static char *store_strdup(struct um_access_store *st, const char *s, size_t n)
{
    return keep(st, um_strndup(s, n));
}

static void defaults(void *part)
{
    struct um_access_conf *a = part;
    memset(a, 0, sizeof(*a));
    a->store = um_calloc(1, sizeof(*a->store));
}

static void dispose(void *part)
{
    struct um_access_conf *a = part;
    if (a->store == NULL) return;
    for (size_t i = 0; i < a->store->n; i++)
        free(a->store->ptrs[i]);
    free(a->store->ptrs);
    free(a->store);
    a->store = NULL;
}

/* ---------------------------------------------------------------- header rules */

static const char *const headers_keys[] = {"request", "response", NULL};
static const char *const rules_keys[] = {"set", "add", "remove", NULL};

/* Fields a rule may not touch: the message's framing and the connection's own fields
 * (RFC 9110 7.6.1), which the server writes itself; a rule changing them would desync
 * the client or the origin from the bytes that really follow. */
static const char *const refused_fields[] = {
    "content-length", "transfer-encoding", "connection", "keep-alive", "proxy-connection", "te",
    "trailer",        "upgrade",           "host",       NULL};

static bool check_name(struct um_settings_load *ld, lua_State *L, const char *path,
                       const char *name, size_t len)
{
    char lower[128];
    if (len == 0 || len >= sizeof lower || !um_http_is_token((um_str){name, len}))
        return um_settings_fail(ld, L, path, "%s: '%s' is not a field name", path, name);
    memcpy(lower, name, len + 1);
    um_settings_lower(lower);
    if (um_settings_in_list(refused_fields, lower))
        return um_settings_fail(ld, L, path,
                                "%s: '%s' is a framing or hop-by-hop field, which the server "
                                "writes itself: a header rule may not change it",
                                path, name);
    return true;
}

static bool check_value(struct um_settings_load *ld, lua_State *L, const char *path, const char *v,
                        size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)v[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return um_settings_fail(ld, L, path, "%s: a control character in the value", path);
    }
    return true;
}

/* set/add = { ["Name"] = "value", ... } */
static bool load_fields(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                        struct um_access_store *st, struct um_access_field **out, size_t *num)
{
    char el[PATH_LEN], kb[64];
    if (!lua_istable(L, idx))
        return um_settings_fail(
            ld, L, path,
            "%s: expected a table such as { [\"X-Frame-Options\"] = \"DENY\" }, got %s", path,
            lua_typename(L, lua_type(L, idx)));
    size_t n = 0;
    lua_pushnil(L);
    while (lua_next(L, idx) != 0) {
        n++;
        lua_pop(L, 1);
    }
    *out = store_calloc(st, n, sizeof(**out));
    *num = 0;
    lua_pushnil(L);
    while (lua_next(L, idx) != 0) {
        um_settings_subpath(el, sizeof el, path, um_settings_key_text(L, -2, kb, sizeof kb));
        if (lua_type(L, -2) != LUA_TSTRING)
            return um_settings_fail(ld, L, el, "%s: expected a field name as the key", el);
        if (lua_type(L, -1) != LUA_TSTRING && lua_type(L, -1) != LUA_TNUMBER)
            return um_settings_fail(ld, L, el, "%s: expected a string value, got %s", el,
                                    lua_typename(L, lua_type(L, -1)));
        size_t nl, vl;
        const char *name = lua_tolstring(L, -2, &nl);
        /* lua_tolstring on a number key would confuse lua_next: the value only. */
        lua_pushvalue(L, -1);
        const char *v = lua_tolstring(L, -1, &vl);
        if (!check_name(ld, L, el, name, nl) || !check_value(ld, L, el, v, vl)) return false;
        struct um_access_field *f = &(*out)[(*num)++];
        f->name = (um_str){store_strdup(st, name, nl), nl};
        f->value = (um_str){store_strdup(st, v, vl), vl};
        lua_pop(L, 2);
    }
    return true;
}

/* remove = { "Server", ... } */
static bool load_remove(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                        struct um_access_store *st, struct um_access_rules *r)
{
    char el[PATH_LEN];
    size_t n;
    if (!lua_istable(L, idx))
        return um_settings_fail(ld, L, path, "%s: expected a list such as { \"Server\" }, got %s",
                                path, lua_typename(L, lua_type(L, idx)));
    if (!um_settings_check_list(ld, L, idx, path, &n)) return false;
    r->remove = store_calloc(st, n, sizeof(*r->remove));
    for (size_t i = 0; i < n; i++) {
        const char *s;
        um_settings_subpath_i(el, sizeof el, path, i + 1);
        lua_rawgeti(L, idx, (int)i + 1);
        if (!um_settings_get_string(ld, L, -1, el, "a field name", &s)) return false;
        if (!check_name(ld, L, el, s, strlen(s))) return false;
        r->remove[r->num_remove++] = (um_str){store_strdup(st, s, strlen(s)), strlen(s)};
        lua_pop(L, 1);
    }
    return true;
}

static bool load_rules(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                       struct um_access_store *st, struct um_access_rules *r)
{
    char sub[PATH_LEN];
    if (!lua_istable(L, idx))
        return um_settings_fail(ld, L, path,
                                "%s: expected a table such as { set = {...}, add = {...}, "
                                "remove = {...} }, got %s",
                                path, lua_typename(L, lua_type(L, idx)));
    if (!um_settings_check_keys(ld, L, idx, path, rules_keys)) return false;
    um_settings_subpath(sub, sizeof sub, path, "set");
    if (um_settings_get_field(L, idx, "set") != LUA_TNIL &&
        !load_fields(ld, L, lua_gettop(L), sub, st, &r->set, &r->num_set))
        return false;
    lua_pop(L, 1);
    um_settings_subpath(sub, sizeof sub, path, "add");
    if (um_settings_get_field(L, idx, "add") != LUA_TNIL &&
        !load_fields(ld, L, lua_gettop(L), sub, st, &r->add, &r->num_add))
        return false;
    lua_pop(L, 1);
    um_settings_subpath(sub, sizeof sub, path, "remove");
    if (um_settings_get_field(L, idx, "remove") != LUA_TNIL &&
        !load_remove(ld, L, lua_gettop(L), sub, st, r))
        return false;
    lua_pop(L, 1);
    return true;
}

static bool load_headers(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                         struct um_access_store *st, const struct um_access_headers **out)
{
    char sub[PATH_LEN];
    if (!lua_istable(L, idx))
        return um_settings_fail(ld, L, path,
                                "%s: expected a table such as { request = {...}, response = "
                                "{...} }, got %s",
                                path, lua_typename(L, lua_type(L, idx)));
    if (!um_settings_check_keys(ld, L, idx, path, headers_keys)) return false;
    struct um_access_headers *h = store_calloc(st, 1, sizeof(*h));
    um_settings_subpath(sub, sizeof sub, path, "request");
    if (um_settings_get_field(L, idx, "request") != LUA_TNIL &&
        !load_rules(ld, L, lua_gettop(L), sub, st, &h->request))
        return false;
    lua_pop(L, 1);
    um_settings_subpath(sub, sizeof sub, path, "response");
    if (um_settings_get_field(L, idx, "response") != LUA_TNIL &&
        !load_rules(ld, L, lua_gettop(L), sub, st, &h->response))
        return false;
    lua_pop(L, 1);
    *out = h;
    return true;
}

static bool read_global(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                        void *part)
{
    struct um_access_conf *a = part;
    return load_headers(ld, L, idx, path, a->store, &a->global);
}

/* ---------------------------------------------------------------- allow, deny */

static bool load_masks(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                       struct um_access_store *st, const struct um_netmask **out, size_t *num)
{
    struct um_netmask *m = NULL;
    if (!um_settings_netmask_list(ld, L, idx, path, &m, num)) {
        free(m);
        return false;
    }
    /* Onto the store, which owns what every route's part points to. */
    struct um_netmask *kept = store_calloc(st, *num, sizeof(*kept));
    if (*num > 0) memcpy(kept, m, *num * sizeof(*kept));
    free(m);
    *out = kept;
    return true;
}

/* ---------------------------------------------------------------- auth */

static const char *const auth_keys[] = {"basic", "realm", "pass_auth", NULL};

/* A realm goes inside a quoted-string: no quote, backslash or control character. */
static bool good_realm(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == '"' || *s == '\\' || *s == 0x7f) return false;
    return true;
}

static bool read_file(const char *name, char **text, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(name, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "cannot read %s: %s", name, strerror(errno));
        return false;
    }
    char *buf = um_malloc(HTPASSWD_MAX + 1);
    size_t n = fread(buf, 1, HTPASSWD_MAX + 1, f);
    bool bad = ferror(f) != 0;
    fclose(f);
    if (bad || n > HTPASSWD_MAX) {
        snprintf(err, errlen, "cannot read %s: %s", name,
                 bad ? "a read error" : "larger than 16 MB");
        free(buf);
        return false;
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return true;
}

static bool load_auth(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                      struct um_access_store *st, const struct um_access_auth **out)
{
    char sub[PATH_LEN], err[512];
    const char *s;
    if (!lua_istable(L, idx))
        return um_settings_fail(ld, L, path,
                                "%s: expected a table such as { basic = \"staff.htpasswd\", "
                                "realm = \"staff\" }, got %s",
                                path, lua_typename(L, lua_type(L, idx)));
    if (!um_settings_check_keys(ld, L, idx, path, auth_keys)) return false;
    struct um_access_auth *a = store_calloc(st, 1, sizeof(*a));
    um_settings_subpath(sub, sizeof sub, path, "basic");
    if (um_settings_get_field(L, idx, "basic") == LUA_TNIL)
        return um_settings_fail(ld, L, sub, "%s: missing (the htpasswd file)", sub);
    char *file = NULL;
    if (!um_settings_get_string(ld, L, -1, sub, "the name of an htpasswd file", &s) ||
        !um_settings_resolve_path(ld, L, sub, s, false, &file))
        return false;
    lua_pop(L, 1);
    a->file = keep(st, file);
    char *text;
    size_t len;
    struct um_access_user *users;
    size_t n;
    if (!read_file(file, &text, &len, err, sizeof err))
        return um_settings_fail(ld, L, sub, "%s: %s", sub, err);
    bool ok = um_access_parse_htpasswd(text, len, &users, &n, err, sizeof err);
    free(text);
    if (!ok) return um_settings_fail(ld, L, sub, "%s: %s, %s", sub, file, err);
    keep(st, users);
    for (size_t i = 0; i < n; i++) {
        keep(st, users[i].name);
        keep(st, users[i].hash);
    }
    a->users = users;
    a->num_users = n;
    um_access_auth_key(users, n, a->tag_key);

    um_settings_subpath(sub, sizeof sub, path, "realm");
    const char *realm = "Restricted";
    if (um_settings_get_field(L, idx, "realm") != LUA_TNIL) {
        if (!um_settings_get_string(ld, L, -1, sub, "a realm such as \"staff\"", &realm))
            return false;
        if (!good_realm(realm) || strlen(realm) > 200)
            return um_settings_fail(ld, L, sub,
                                    "%s: a realm of at most 200 characters without '\"', '\\' "
                                    "or control characters",
                                    sub);
    }
    a->realm = store_strdup(st, realm, strlen(realm));
    char ch[256];
    int cl = snprintf(ch, sizeof ch, "Basic realm=\"%s\"", realm);
    a->challenge = store_strdup(st, ch, (size_t)cl);
    lua_pop(L, 1);
    if (!um_settings_opt_bool(ld, L, idx, path, "pass_auth", &a->pass, NULL)) return false;
    *out = a;
    return true;
}

/* ---------------------------------------------------------------- a route */

static const char *const route_keys[] = {"allow", "deny", "auth", "headers", NULL};

/* The route's table at idx, over a copy of the global part. */
static bool read_route(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                       void *part)
{
    struct um_access_conf *a = part;
    char sub[PATH_LEN];
    struct um_access_store *st = a->store;
    um_settings_subpath(sub, sizeof sub, path, "allow");
    if (um_settings_get_field(L, idx, "allow") != LUA_TNIL) {
        if (!load_masks(ld, L, lua_gettop(L), sub, st, &a->allow, &a->num_allow)) return false;
        a->has_allow = true;
    }
    lua_pop(L, 1);
    um_settings_subpath(sub, sizeof sub, path, "deny");
    if (um_settings_get_field(L, idx, "deny") != LUA_TNIL &&
        !load_masks(ld, L, lua_gettop(L), sub, st, &a->deny, &a->num_deny))
        return false;
    lua_pop(L, 1);
    um_settings_subpath(sub, sizeof sub, path, "auth");
    if (um_settings_get_field(L, idx, "auth") != LUA_TNIL &&
        !load_auth(ld, L, lua_gettop(L), sub, st, &a->auth))
        return false;
    lua_pop(L, 1);
    um_settings_subpath(sub, sizeof sub, path, "headers");
    if (um_settings_get_field(L, idx, "headers") != LUA_TNIL &&
        !load_headers(ld, L, lua_gettop(L), sub, st, &a->route))
        return false;
    lua_pop(L, 1);
    return true;
}

static const struct um_settings_table tables[] = {
    {"headers", headers_keys},
    {"headers.request", rules_keys},
    {"headers.response", rules_keys},
    {"routes[N].auth", auth_keys},
    {NULL, NULL},
};

static unsigned index_in_list;

const struct um_settings um_access_settings = {
    .index = &index_in_list,
    .global = "headers",
    .size = sizeof(struct um_access_conf),
    .defaults = defaults,
    .read = read_global,
    .dispose = dispose,
    .route_keys = route_keys,
    .read_route = read_route,
    .tables = tables,
};
