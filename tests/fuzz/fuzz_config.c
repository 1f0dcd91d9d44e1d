/* Fuzzes the configuration loader (um_config_load) and its line finder (lualines.c).
 *
 * The input is written to a per-process file under /tmp and loaded as config.lua. The line
 * finder only runs when a value is rejected, so it is also driven directly over the input.
 *
 * Sandbox. A config is a Lua program with the whole standard library, which a fuzzer must
 * not be given: os.remove, os.execute, io.open and ffi would let mutated inputs delete or
 * write files, and os.exit or debug.sethook would end the run or lift the instruction
 * budget. This file therefore defines its own luaL_openlibs, which the linker picks for
 * config.c over LuaJIT's: it opens base, table, string, math, bit and a read-only os (time,
 * clock, date, difftime, getenv); it omits dofile and loadfile (which could read
 * /dev/zero) and print (noise); it limits load and loadstring to text chunks (LuaJIT does
 * not verify bytecode); and it caps the memory of the Lua state, since the instruction
 * budget does not bound what one string.rep or concatenation allocates (lua_close is
 * wrapped too, to take the cap off again). The loader's own code (parsing, validation,
 * messages, freeing) runs unchanged. Roots are resolved with realpath and stat only, so
 * any existing directory is a valid root.
 *
 * Properties: a loaded config is valid (listen and routes non-empty, workers 1..256,
 * route paths start with '/', roots are absolute); a message is NUL-terminated inside the
 * caller's buffer and names the file; the line finder returns lines inside the file. */
#include <dlfcn.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "config/lualines.h"
#include "fuzz_common.h"
#include "umbra/config.h"
#include "umbra/module.h"

#define LUA_MEMORY_CAP (64u << 20)

struct capped_alloc {
    lua_Alloc f;
    void *ud;
    size_t used;
};

static void *capped(void *ud, void *ptr, size_t osize, size_t nsize)
{
    struct capped_alloc *a = ud;
    size_t old = ptr ? osize : 0;
    if (nsize > old && a->used + (nsize - old) > LUA_MEMORY_CAP) return NULL;
    void *p = a->f(a->ud, ptr, osize, nsize);
    if (p != NULL || nsize == 0) a->used = a->used - (old < a->used ? old : a->used) + nsize;
    return p;
}

/* One allocator record per state: config.c closes each state before it loads the next,
 * and only the main thread loads configs. */
static struct capped_alloc the_alloc;

static const char SANDBOX[] =
    "local load = load\n"
    "_G.load = function(c, name, mode, env) return load(c, name, 't', env) end\n"
    "loadstring = function(s, name) return load(s, name, 't') end\n"
    "dofile, loadfile, print = nil, nil, nil\n"
    "local os = os\n"
    "_G.os = { time = os.time, clock = os.clock, date = os.date, difftime = os.difftime,\n"
    "          getenv = os.getenv }\n";

/* Replaces LuaJIT's luaL_openlibs for config.c; see the comment at the top. */
void luaL_openlibs(lua_State *L)
{
    static const luaL_Reg libs[] = {
        {"", luaopen_base},
        {LUA_TABLIBNAME, luaopen_table},
        {LUA_STRLIBNAME, luaopen_string},
        {LUA_MATHLIBNAME, luaopen_math},
        {LUA_BITLIBNAME, luaopen_bit},
        {LUA_OSLIBNAME, luaopen_os},
    };
    for (size_t i = 0; i < UM_NELEMS(libs); i++) {
        lua_pushcfunction(L, libs[i].func);
        lua_pushstring(L, libs[i].name);
        lua_call(L, 1, 0);
    }
    FUZZ_CHECK(luaL_loadbuffer(L, SANDBOX, sizeof SANDBOX - 1, "=fuzz-sandbox") == 0);
    lua_call(L, 0, 0);

    the_alloc.f = lua_getallocf(L, &the_alloc.ud);
    FUZZ_CHECK(the_alloc.f != capped);
    the_alloc.used = (size_t)lua_gc(L, LUA_GCCOUNT, 0) * 1024;
    lua_setallocf(L, capped, &the_alloc);
}

/* Also replaces lua_close for config.c: LuaJIT releases the arena of its built-in
 * allocator only when the state still uses that allocator, so the original goes back in
 * before the real lua_close runs (otherwise every load leaks its whole arena). */
void lua_close(lua_State *L)
{
    static void (*real_close)(lua_State *);
    if (real_close == NULL) *(void **)&real_close = dlsym(RTLD_NEXT, "lua_close");
    FUZZ_CHECK(real_close != NULL);
    void *ud;
    if (lua_getallocf(L, &ud) == capped) lua_setallocf(L, the_alloc.f, the_alloc.ud);
    real_close(L);
}

static char config_file[64];

static void remove_config_file(void)
{
    unlink(config_file);
}

static void write_config(const uint8_t *data, size_t size)
{
    if (config_file[0] == '\0') {
        snprintf(config_file, sizeof config_file, "/tmp/umbra-fuzz-config-%ld.lua", (long)getpid());
        atexit(remove_config_file);
    }
    FILE *f = fopen(config_file, "wb");
    FUZZ_CHECK(f != NULL);
    FUZZ_CHECK(fwrite(data, 1, size, f) == size);
    FUZZ_CHECK(fclose(f) == 0);
}

static void check_config(const struct um_config *c)
{
    FUZZ_CHECK(c->num_listen >= 1 && c->listen != NULL);
    for (size_t i = 0; i < c->num_listen; i++)
        FUZZ_CHECK(c->listen[i].text != NULL && c->listen[i].addrlen > 0);
    FUZZ_CHECK(c->workers >= 1 && c->workers <= 256);
    FUZZ_CHECK(c->num_routes >= 1 && c->routes != NULL);
    for (size_t i = 0; i < c->num_routes; i++) {
        const struct um_route *r = &c->routes[i];
        FUZZ_CHECK(r->path != NULL && r->path[0] == '/');
        FUZZ_CHECK(r->root == NULL || r->root[0] == '/');
    }
    FUZZ_CHECK(c->limits.max_request_line >= 1 && c->limits.max_header_bytes >= 1);
    FUZZ_CHECK(c->timeouts.header > 0 && c->timeouts.idle > 0 && c->timeouts.send > 0 &&
               c->timeouts.shutdown > 0);
    FUZZ_CHECK(strcmp(c->file, config_file) == 0);
}

static void fuzz_loader(const uint8_t *data, size_t size)
{
    write_config(data, size);
    /* Messages go into an exact-size buffer of varying length (or none at all), so that
     * truncation is exercised and an overlong write is an ASan report. */
    size_t errlen = size % 13 == 0 ? 0 : 1 + (size * 37) % 300;
    char *err = errlen ? fuzz_alloc(errlen) : NULL;
    if (err) memset(err, 'x', errlen);

    struct um_config *c = um_config_load(config_file, err, errlen);
    /* UMBRA_FUZZ_VERBOSE=1 shows what each input got, when reproducing by hand. */
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("UMBRA_FUZZ_VERBOSE") != NULL;
    if (verbose) {
        const char *what = err && memchr(err, '\0', errlen) ? err : "failed";
        fprintf(stderr, "um_config_load: %s\n", c ? "ok" : what);
    }
    if (c != NULL) {
        check_config(c);
        um_config_unref(c);
    } else if (err != NULL) {
        FUZZ_CHECK(memchr(err, '\0', errlen) != NULL);
        size_t fl = strlen(config_file);
        if (errlen > fl + 2) FUZZ_CHECK(strncmp(err, config_file, fl) == 0 && err[fl] == ':');
    }
    free(err);
}

static void fuzz_lualines(const uint8_t *data, size_t size)
{
    /* clang-format off */
    static const char *const paths[] = {
        "listen", "listen.1", "routes", "routes.1", "routes.1.root", "routes.2.path", "limits",
        "limits.max_body_bytes", "timeouts.idle", "mime.wasm", "workers", "a", "",
        "a.b.c.d.e.f.g.h", "routes.1.1.1.1.1", "x.1.y.2",
    };
    /* clang-format on */
    /* Lines start at 1; the scanner may count a final line without a line break. */
    int max_line = 1;
    for (size_t i = 0; i < size; i++)
        if (data[i] == '\n' || data[i] == '\r') max_line++;

    char *src = fuzz_dup(data, size);
    struct um__lualines ll;
    memset(&ll, 0, sizeof ll);
    um__lualines_scan(&ll, src, size);
    for (size_t i = 0; i < ll.num; i++)
        FUZZ_CHECK(ll.entries[i].path != NULL && ll.entries[i].line >= 1 &&
                   ll.entries[i].line <= max_line);
    for (size_t i = 0; i < UM_NELEMS(paths); i++) {
        int line = um__lualines_find(&ll, paths[i]);
        FUZZ_CHECK(line >= 0 && line <= max_line);
    }
    /* A second scan adds to the first. */
    um__lualines_scan(&ll, src, size);
    um__lualines_dispose(&ll);
    FUZZ_CHECK(ll.entries == NULL && ll.num == 0);
    free(src);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    um_modules_init(); /* the modules' settings (once) */
    fuzz_lualines(data, size);
    fuzz_loader(data, size);
    return 0;
}
