/* SPDX-License-Identifier: BSD-2-Clause */
/* mime = { ext = "type", ... }: media types of the files routes with a root serve, beside
 * the built-in ones. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static int cmp_mime(const void *a, const void *b)
{
    return strcmp(((const struct um_mime_type *)a)->ext, ((const struct um_mime_type *)b)->ext);
}

bool um__cfg_load_mime(struct um_settings_load *ld, lua_State *L)
{
    struct um_config *c = ld->c;
    char key[128], sub[PATH_LEN];
    const char *s;
    int t = um_settings_get_global(L, "mime");
    if (t == LUA_TNIL)
        return true;
    if (t != LUA_TTABLE)
        return um_settings_fail(ld, L, "mime",
                                "mime: expected a table of extension = \"type\", got %s",
                                lua_typename(L, t));
    int idx = lua_gettop(L);
    size_t n = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        n++;
    }
    c->mime = um_calloc(n, sizeof *c->mime);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        um_settings_key_text(L, -2, key, sizeof key);
        um_settings_subpath(sub, sizeof sub, "mime", key);
        if (lua_type(L, -2) != LUA_TSTRING)
            return um_settings_fail(ld, L, sub, "mime: expected extensions as keys, got [%s]", key);
        const char *ext = lua_tostring(L, -2);
        bool ok = ext[0] != '\0' && strlen(ext) < sizeof key;
        for (const char *p = ext; *p && ok; p++)
            ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                 (*p >= '0' && *p <= '9') || *p == '_' || *p == '-' || *p == '+';
        if (!ok)
            return um_settings_fail(ld, L, sub,
                                    "mime: bad extension '%s' (write it without the dot, "
                                    "e.g. md = \"text/markdown\")",
                                    key);
        if (!um_settings_get_string(ld, L, -1, sub, "a media type such as \"text/plain\"", &s))
            return false;
        for (const char *p = s; *p; p++)
            if ((unsigned char)*p < ' ' || *p == 0x7f)
                return um_settings_fail(ld, L, sub,
                                        "%s: the media type contains a control character", sub);
        if (strchr(s, '/') == NULL)
            return um_settings_fail(
                ld, L, sub, "%s: bad media type '%s' (expected e.g. \"text/plain\")", sub, s);
        struct um_mime_type *m = &c->mime[c->num_mime];
        m->ext = um_strndup(ext, strlen(ext));
        for (char *p = m->ext; *p; p++)
            if (*p >= 'A' && *p <= 'Z')
                *p = (char)(*p + 32);
        m->type = um_strndup(s, strlen(s));
        for (size_t j = 0; j < c->num_mime; j++)
            if (strcmp(c->mime[j].ext, m->ext) == 0) {
                free(m->ext);
                free(m->type);
                return um_settings_fail(ld, L, sub, "mime: extension '%s' is given twice", key);
            }
        c->num_mime++;
        lua_pop(L, 1);
    }
    qsort(c->mime, c->num_mime, sizeof *c->mime, cmp_mime);
    return true;
}
