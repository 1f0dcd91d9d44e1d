/* Unit tests of the request/response bindings of the Lua hooks (src/lua/), the
 * Yunying translation of the loader and the folding of Lua 5.3 shifts. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/lualines.h"
#include "umbra/config.h"
#include "umbra/cache.h"
#include "umbra/module.h"
#include "umbra/context.h"
#include "umbra/hooks.h"
#include "umbra/http1.h"
#include "umbra/log.h"
#include "umbra/luavm.h"

#include <lauxlib.h>
#include <lualib.h>

#include "lua/internal.h"

static char path[] = "/tmp/umbra-test-hooks-XXXXXX";
static struct um_context ctx; /* the worker the hooks run for (no loop: none is needed) */

/* Writes text to a new temporary file, named by path until drop_file. */
static void put_file(const char *text)
{
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

static void drop_file(void)
{
    unlink(path);
    memcpy(path + strlen(path) - 6, "XXXXXX", 6);
}

/* The request states of the config load() loaded last (for worker 0), as the server
 * makes them. */
static struct um_hooks *hooks;

static struct um_config *load(const char *text)
{
    put_file(text);
    char err[512];
    struct um_config *c = um_config_load(path, err, sizeof err);
    if (c != NULL && (hooks = um_hooks_create(c, 1, err, sizeof err)) == NULL) {
        um_config_unref(c);
        c = NULL;
    }
    drop_file();
    if (c == NULL)
        fail_msg("load failed: %s", err);
    return c;
}

static void unload(struct um_config *c)
{
    um_hooks_destroy(hooks);
    hooks = NULL;
    um_config_unref(c);
}

static char *load_error(const char *text)
{
    put_file(text);
    static char err[512];
    struct um_config *c = um_config_load(path, err, sizeof err);
    drop_file();
    assert_null(c);
    char *colon = strchr(err, ':'); /* skip the temp file's name */
    return colon ? colon + 1 : err;
}

struct parsed {
    char buf[2048];
    struct um_request req;
    struct um_arena arena;
    struct um_hook_request hr;
};

static void parse(struct parsed *p, const char *raw, const struct um_config *c)
{
    memset(p, 0, sizeof *p);
    snprintf(p->buf, sizeof p->buf, "%s", raw);
    struct um_http1_parser ps;
    um_http1_parser_init(&ps);
    int status;
    assert_int_equal(um_http1_parse_request(&ps, p->buf, strlen(p->buf), 8192, 16384, &p->req,
                                            &status),
                     UM_OK);
    p->hr = (struct um_hook_request){.req = &p->req, .route = &c->routes[0],
                                     .client_ip = "192.0.2.7", .client_port = 4242,
                                     .scheme = "http", .arena = &p->arena, .upstream = -1};
}

static bool str_is(um_str s, const char *want)
{
    return s.len == strlen(want) && memcmp(s.base, want, s.len) == 0;
}

static const um_str *field(const struct um_request *req, const char *name)
{
    return um_http1_find_header(req, name);
}

static void test_rewrites(void **state)
{
    (void)state;
    struct um_config *c = load(
        "upstreams = { a = { servers = { \"http://127.0.0.1:1\" } },\n"
        "              b = { servers = { \"http://127.0.0.1:2\" } } }\n"
        "routes = { { path = \"/\", upstream = \"a\", name = \"main\" },\n"
        "           { path = \"/other/\", upstream = \"a\", name = \"other\" } }\n"
        "function on_request(req)\n"
        "  assert(req.hostname == 'h.example', req.hostname)\n"
        "  req.path = '/new' .. req.path\n"
        "  req.query = 'q=' .. req.client_ip\n"
        "  req.host = 'backend.example'\n"
        "  req.method = 'POST'\n"
        "  req:set_header('X-Port', req.client_port)\n"
        "  req:set_header('X-Dup', 'one')\n"
        "  req:remove_header('X-Gone')\n"
        "  req.upstream = 'b'\n"
        "  req.route = 'other'\n"
        "  req.cache_key = 'k:' .. req.path\n"
        "  req.ttl = 42\n"
        "  req.no_cache = true\n"
        "end\n");
    struct parsed p;
    parse(&p, "GET /x?old=1 HTTP/1.1\r\nHost: H.Example:8080\r\nX-Dup: a\r\nX-Gone: 1\r\nX-Dup: b\r\n\r\n", c);
    assert_int_equal(um_hooks_on_request(&ctx, hooks, &p.hr), UM_HOOK_CONTINUE);
    assert_true(str_is(p.req.path, "/new/x"));
    assert_true(str_is(p.req.query, "q=192.0.2.7"));
    assert_true(str_is(p.req.target, "/new/x?q=192.0.2.7"));
    assert_true(p.hr.path_changed);
    assert_true(str_is(p.req.authority, "backend.example"));
    assert_true(str_is(p.req.method, "POST"));
    assert_int_equal(p.req.method_id, UM_METHOD_POST);
    assert_true(str_is(*field(&p.req, "x-port"), "4242"));
    assert_true(str_is(*field(&p.req, "x-dup"), "one"));
    size_t dups = 0;
    for (size_t i = 0; i < p.req.num_headers; i++)
        dups += str_is(p.req.headers[i].name, "X-Dup");
    assert_int_equal(dups, 1);
    assert_null(field(&p.req, "x-gone"));
    assert_int_equal(p.hr.upstream, 1);
    assert_ptr_equal(p.hr.route, &c->routes[1]);
    assert_true(str_is(p.hr.cache_key, "k:/new/x"));
    assert_true(p.hr.has_ttl);
    assert_int_equal(p.hr.ttl, 42);
    assert_true(p.hr.no_cache);
    um_arena_reset(&p.arena);
    unload(c);
}

static void test_respond_and_redirect(void **state)
{
    (void)state;
    struct um_config *c = load(
        "routes = { { path = '/', on_request = function(req)\n"
        "  if req.path == '/r' then return umbra.redirect('https://e.example/', 301) end\n"
        "  return umbra.respond(201, 'made', { ['X-A'] = '1', ['Set-Cookie'] = { 'a=1', 'b=2' } })\n"
        "end } }\n");
    struct parsed p;
    parse(&p, "GET / HTTP/1.1\r\nHost: h\r\n\r\n", c);
    assert_int_equal(um_hooks_on_request(&ctx, hooks, &p.hr), UM_HOOK_ANSWER);
    assert_int_equal(p.hr.status, 201);
    assert_true(str_is(p.hr.resp_body, "made"));
    assert_int_equal(p.hr.num_headers, 3);
    int cookies = 0;
    for (size_t i = 0; i < p.hr.num_headers; i++)
        cookies += str_is(p.hr.headers[i].name, "Set-Cookie");
    assert_int_equal(cookies, 2);
    um_arena_reset(&p.arena);

    parse(&p, "GET /r HTTP/1.1\r\nHost: h\r\n\r\n", c);
    assert_int_equal(um_hooks_on_request(&ctx, hooks, &p.hr), UM_HOOK_ANSWER);
    assert_int_equal(p.hr.status, 301);
    assert_int_equal(p.hr.num_headers, 1);
    assert_true(str_is(p.hr.headers[0].name, "Location"));
    assert_true(str_is(p.hr.headers[0].value, "https://e.example/"));
    um_arena_reset(&p.arena);
    unload(c);
}

/* An HTTP/1.0 request may come without Host: its authority is empty (no bytes at all), and
 * req.hostname and req.host read as "". */
static void test_hostname_without_host(void **state)
{
    (void)state;
    struct um_config *c = load(
        "routes = { { path = '/', on_request = function(req)\n"
        "  return umbra.respond(200, '[' .. req.hostname .. '][' .. req.host .. ']')\n"
        "end } }\n");
    struct parsed p;
    parse(&p, "GET / HTTP/1.0\r\n\r\n", c);
    assert_null(p.req.authority.base);
    assert_int_equal(um_hooks_on_request(&ctx, hooks, &p.hr), UM_HOOK_ANSWER);
    assert_true(str_is(p.hr.resp_body, "[][]"));
    um_arena_reset(&p.arena);
    unload(c);
}

/* Each of these fails the call (a 500), and the state keeps working afterwards. */
static void test_refusals(void **state)
{
    (void)state;
    struct um_config *c = load(
        "routes = { { path = '/', on_request = function(req)\n"
        "  local p = req.path\n"
        "  if p == '/crlf' then req:set_header('X-A', 'a\\r\\nX-B: b') end\n"
        "  if p == '/lf-name' then req:set_header('X\\nA', 'a') end\n"
        "  if p == '/host' then req:set_header('Host', 'x') end\n"
        "  if p == '/te' then req:set_header('Transfer-Encoding', 'chunked') end\n"
        "  if p == '/path' then req.path = 'no-slash' end\n"
        "  if p == '/path-crlf' then req.path = '/a\\r\\nb' end\n"
        "  if p == '/query' then req.query = 'a b' end\n"
        "  if p == '/hostval' then req.host = 'a/b' end\n"
        "  if p == '/unknown' then req.nothing = 1 end\n"
        "  if p == '/respond-cl' then return umbra.respond(200, 'x', { ['Content-Length'] = '9' }) end\n"
        "  if p == '/respond-val' then return umbra.respond(200, 'x', { ['X'] = 'a\\0b' }) end\n"
        "  if p == '/redirect' then return umbra.redirect('/a b') end\n"
        "  if p == '/budget' then local i = 0 while true do i = i + 1 end end\n"
        "  return umbra.respond(200, 'fine')\n"
        "end } }\n");
    static const char *const bad[] = {"/crlf", "/lf-name", "/host", "/te", "/path",
                                      "/path-crlf", "/query", "/hostval", "/unknown",
                                      "/respond-cl", "/respond-val", "/redirect", "/budget"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char raw[256];
        snprintf(raw, sizeof raw, "GET %s HTTP/1.1\r\nHost: h\r\n\r\n", bad[i]);
        struct parsed p;
        parse(&p, raw, c);
        if (um_hooks_on_request(&ctx, hooks, &p.hr) != UM_HOOK_FAIL)
            fail_msg("%s did not fail", bad[i]);
        assert_null(field(&p.req, "x-b"));
        um_arena_reset(&p.arena);
        parse(&p, "GET /ok HTTP/1.1\r\nHost: h\r\n\r\n", c);
        assert_int_equal(um_hooks_on_request(&ctx, hooks, &p.hr), UM_HOOK_ANSWER);
        assert_true(str_is(p.hr.resp_body, "fine"));
        um_arena_reset(&p.arena);
    }
    unload(c);
}

static void test_on_response(void **state)
{
    (void)state;
    struct um_config *c = load(
        "routes = { { path = '/', root = '/tmp', on_response = function(req, res)\n"
        "  res:set_header('X-Route', req.path)\n"
        "end } }\n"
        "function on_response(req, res)\n"
        "  assert(res.status == 200 and res:header('x-a') == '1')\n"
        "  res:remove_header('X-A')\n"
        "  res:set_header('X-B', 'new')\n"
        "  res.ttl = 5\n"
        "  res.cacheable = res.headers['x-c'] ~= 'private'\n"
        "end\n");
    struct parsed p;
    parse(&p, "GET /f HTTP/1.1\r\nHost: h\r\n\r\n", c);
    struct um_header in_fields[] = {{UM_STR("X-A"), UM_STR("1")},
                                    {UM_STR("X-B"), UM_STR("old")},
                                    {UM_STR("X-C"), UM_STR("private")}};
    struct um_response_head in = {.status = 200, .headers = in_fields, .num_headers = 3,
                                  .content_length = 0};
    struct um_arena arena = {0};
    struct um_hook_response out = {.arena = &arena};
    assert_true(um_hooks_on_response(&ctx, hooks, &c->routes[0], &p.req, "127.0.0.1", &in, &out));
    assert_int_equal(out.head.num_headers, 3);
    assert_true(str_is(out.head.headers[0].name, "X-B"));
    assert_true(str_is(out.head.headers[0].value, "new"));
    assert_true(str_is(out.head.headers[1].name, "X-C"));
    assert_true(str_is(out.head.headers[2].name, "X-Route"));
    assert_true(str_is(out.head.headers[2].value, "/f"));
    assert_true(out.head.has_ttl);
    assert_int_equal(out.head.ttl, 5);
    assert_true(out.head.no_store);
    /* the origin's fields are untouched */
    assert_true(str_is(in_fields[0].name, "X-A"));
    um_arena_reset(&arena);
    /* the request is read-only there */
    unload(c);
    c = load("routes = { { path = '/', root = '/tmp' } }\n"
             "function on_response(req, res) req.path = '/x' end\n");
    out = (struct um_hook_response){.arena = &arena};
    assert_false(um_hooks_on_response(&ctx, hooks, &c->routes[0], &p.req, "127.0.0.1", &in, &out));
    um_arena_reset(&arena);
    um_arena_reset(&p.arena);
    unload(c);
}

static void test_yunying(void **state)
{
    (void)state;
    struct um_config *c = load(
        "port = 0\nworking_thread_num = 3\ncache_size_bytes = 1 << 22\n"
        "cache_default_max_age = 7\norigin_type = 'upstream'\n"
        "upstream_domain = '127.0.0.1'\nupstream_port = 9\n"
        "function upstream_set(p, m, h)\n"
        "  assert(p == '/a?b' and m == 'GET' and h == 'client.example')\n"
        "  set_path('/z?y=1'); set_method('PUT'); set_body('B'); set_host('up.example')\n"
        "  set_upstream_protocol('https'); set_upstream_port(8443)\n"
        "end\n");
    assert_true(c->lua.yunying);
    assert_int_equal(c->workers, 3);
    assert_int_equal(um_cache_conf(c)->memory, 4u << 20);
    assert_true(um_cache_conf(c)->default_ttl == 7);
    assert_int_equal(c->num_upstreams, 1);
    assert_string_equal(c->upstreams[0].servers[0].url, "http://127.0.0.1:9");
    assert_null(c->upstreams[0].host); /* upstream_set sets the Host */
    assert_int_equal(c->num_routes, 1);
    assert_true(c->routes[0].cache);
    struct parsed p;
    parse(&p, "GET /a?b HTTP/1.1\r\nHost: client.example\r\n\r\n", c);
    assert_int_equal(um_hooks_on_request(&ctx, hooks, &p.hr), UM_HOOK_CONTINUE);
    assert_true(str_is(p.req.target, "/z?y=1"));
    assert_true(str_is(p.req.method, "PUT"));
    assert_true(str_is(p.req.authority, "up.example"));
    assert_true(p.hr.has_body);
    assert_true(str_is(p.hr.body, "B"));
    assert_string_equal(p.hr.upstream_url, "https://127.0.0.1:8443");
    assert_true(str_is(p.hr.cache_key, "client.example /a?b"));
    um_arena_reset(&p.arena);
    unload(c);

    assert_string_equal(load_error("port = 1\nlisten = '127.0.0.1:1'\n"),
                        "2: 'listen' is an Umbra setting and 'port' a Yunying one: a config "
                        "file uses one style or the other, not both");
}

/* The workers' states are made at load time, each running the file's top level once and
 * seeing its own umbra.worker; a file that fails only there fails the load with FILE:LINE. */
static void test_states_made_at_load(void **state)
{
    (void)state;
    const char *text = "listen = { '127.0.0.1:1' }\n"
                       "local w = umbra and umbra.worker\n"
                       "routes = { { path = '/', root = '.', on_request = function(req)\n"
                       "  return umbra.respond(200, 'made for ' .. tostring(w) .. ', on ' ..\n"
                       "                        umbra.worker)\n"
                       "end } }\n";
    put_file(text);
    char err[512];
    struct um_config *c = um_config_load(path, err, sizeof err);
    assert_non_null(c);
    /* The loader makes none: the server asks for them. */
    struct um_hooks *h = um_hooks_create(c, 3, err, sizeof err);
    assert_non_null(h);
    assert_int_equal(um_hooks_num_states(h), 3);
    for (int w = 0; w < 3; w++) {
        ctx.worker_id = w;
        struct parsed p;
        parse(&p, "GET / HTTP/1.1\r\nHost: h\r\n\r\n", c);
        assert_int_equal(um_hooks_on_request(&ctx, h, &p.hr), UM_HOOK_ANSWER);
        char want[64];
        snprintf(want, sizeof want, "made for %d, on %d", w, w);
        assert_true(str_is(p.hr.resp_body, want));
        um_arena_reset(&p.arena);
    }
    /* A worker the snapshot has no state for gets a failure, not a state made now. */
    ctx.worker_id = 3;
    struct parsed p;
    parse(&p, "GET / HTTP/1.1\r\nHost: h\r\n\r\n", c);
    assert_int_equal(um_hooks_on_request(&ctx, h, &p.hr), UM_HOOK_FAIL);
    um_arena_reset(&p.arena);
    ctx.worker_id = 0;
    um_hooks_destroy(h);
    um_config_unref(c);

    /* The loader has no umbra table; the states do. */
    const char *bad = "listen = { '127.0.0.1:1' }\n"
                      "routes = { { path = '/', root = '.', on_request = function() end } }\n"
                      "if umbra and umbra.worker == 1 then error('no worker 1') end\n";
    drop_file();
    put_file(bad);
    c = um_config_load(path, err, sizeof err);
    assert_non_null(c);
    assert_null(um_hooks_create(c, 2, err, sizeof err)); /* and no state left */
    char want[600];
    snprintf(want, sizeof want, "%s:3: no worker 1 (in worker 1's request hooks)", path);
    assert_string_equal(err, want);
    um_config_unref(c);

    /* A top level that runs out of budget there is named by its line too. */
    const char *loop = "listen = { '127.0.0.1:1' }\n"
                       "routes = { { path = '/', root = '.', on_request = function() end } }\n"
                       "if umbra then\n"
                       "  while true do end\n"
                       "end\n";
    drop_file();
    put_file(loop);
    c = um_config_load(path, err, sizeof err);
    assert_non_null(c);
    assert_null(um_hooks_create(c, 1, err, sizeof err));
    snprintf(want, sizeof want, "%s:4: instruction budget of 10000000 exceeded (endless loop?) "
             "(in worker 0's request hooks)", path);
    assert_string_equal(err, want);
    um_config_unref(c);
    drop_file();
}

/* Runs code in a fresh request sandbox under the hooks' budget; returns the pcall result
 * and copies the error message (if any) to msg. */
static int sandbox_run(size_t memory, const char *code, char *msg, size_t msglen)
{
    lua_State *L = um_lua_sandbox_new(UM_LUA_SANDBOX_REQUEST, memory);
    assert_non_null(L);
    assert_int_equal(luaL_loadstring(L, code), 0);
    int r = um_lua_sandbox_pcall(L, 0, 0, 0, UM_HOOK_BUDGET);
    snprintf(msg, msglen, "%s", r != 0 && lua_isstring(L, -1) ? lua_tostring(L, -1) : "");
    um_lua_sandbox_close(L);
    return r;
}

/* What a request state has, and that nothing in it lifts the budget or loads bytecode. */
static void test_sandbox_library(void **state)
{
    (void)state;
    char msg[512];
    assert_int_equal(
        sandbox_run(1u << 20,
                    "assert(jit == nil and io == nil and require == nil and package == nil)\n"
                    "assert(dofile == nil and loadfile == nil and newproxy == nil)\n"
                    "assert(module == nil and ffi == nil and string.dump == nil)\n"
                    "assert(debug.sethook == nil and debug.getregistry == nil)\n"
                    "assert(debug.traceback and os.time and os.clock and os.date and os.difftime)\n"
                    "assert(os.exit == nil and os.execute == nil and os.getenv == nil)\n"
                    "assert(coroutine.wrap and bit.band and table.concat and math.floor)\n"
                    "assert(load('return 1')() == 1 and loadstring('return 2')() == 2)\n"
                    "local f, e = load('\\27LJ\\2\\10'); assert(f == nil and e:find('mode'))\n"
                    "f, e = load('\\27LJ\\2\\10', 'x', 'b'); assert(f == nil and e:find('mode'))\n"
                    "f, e = loadstring('\\27LJ\\2\\10'); assert(f == nil and e:find('mode'))\n"
                    "local parts, i = { 'return ', '3' }, 0\n"
                    "assert(load(function() i = i + 1; return parts[i] end)() == 3)\n"
                    "assert(load('return x', 'n', 't', { x = 4 })() == 4)\n"
                    "assert(not pcall(collectgarbage, 'stop'))\n"
                    "assert(collectgarbage('count') > 0 and collectgarbage() == 0)\n"
                    "assert(select(2, xpcall(error, function(m) return 'handled ' .. m end, 'e'))\n"
                    "       == 'handled e')\n",
                    msg, sizeof msg),
        0);
}

static void test_sandbox_budget_and_cap(void **state)
{
    (void)state;
    char msg[512];
    /* A loop whose xpcall handler loops too: the handler does not run past the budget. */
    assert_int_not_equal(sandbox_run(1u << 20,
                                     "xpcall(function() while true do end end,\n"
                                     "       function() while true do end end)\n"
                                     "while true do end\n",
                                     msg, sizeof msg),
                         0);
    assert_non_null(strstr(msg, "instruction budget of 1000000 exceeded"));
    /* Growth: at the line it reached, or refused at once when too large. */
    assert_int_equal(sandbox_run(2u << 20,
                                 "local t = {}\n"
                                 "while true do t[#t + 1] = string.rep('x', 1000) .. #t end\n",
                                 msg, sizeof msg),
                     LUA_ERRMEM);
    assert_string_equal(msg, "[string \"local t = {}...\"]:2: Lua memory limit of 2MB exceeded "
                             "(limits.lua_memory)");
    assert_int_equal(sandbox_run(2u << 20, "local s = string.rep('x', 2 ^ 30)\n", msg, sizeof msg),
                     LUA_ERRMEM);
    assert_string_equal(msg, "[string \"local s = string.rep('x', 2 ^ 30)...\"]:1: Lua memory "
                             "limit of 2MB exceeded (limits.lua_memory)");
    /* Caught by the script: the call fails all the same. */
    assert_int_equal(sandbox_run(2u << 20,
                                 "pcall(string.rep, 'x', 2 ^ 30)\n"
                                 "pcall(function() local s = 'x' while true do s = s .. s end end)\n",
                                 msg, sizeof msg),
                     LUA_ERRMEM);
    assert_non_null(strstr(msg, "Lua memory limit of 2MB exceeded"));
    /* C functions calling Lua, nested: an error, not a crash. */
    assert_int_not_equal(sandbox_run(1u << 20,
                                     "local function f(a, b) table.sort({3, 2, 1}, f) end\n"
                                     "f(1, 2)\n",
                                     msg, sizeof msg),
                         0);
    assert_non_null(strstr(msg, "C stack overflow"));
}

/* The sandbox's string.find, match, gmatch and gsub (src/luavm/pattern.c) answer what
 * LuaJIT's do, errors included, over random patterns and subjects made of the pieces where
 * matchers go wrong; and their backtracking is charged to the budget. */
static const char PATTERN_RUN[] =
    "local fn, s, p, a3, a4 = ...\n"
    "local function ser(ok, ...)\n"
    "  if not ok then return 'error ' .. (tostring((...)):gsub('^.-: ', '')) end\n"
    "  local t = { 'ok' }\n"
    "  for i = 1, select('#', ...) do\n"
    "    local v = select(i, ...); t[#t + 1] = type(v) .. ':' .. tostring(v)\n"
    "  end\n"
    "  return table.concat(t, '|')\n"
    "end\n"
    "if fn == 'gmatch' then\n"
    "  return ser(pcall(function()\n"
    "    local r, n = {}, 0\n"
    "    for a, b in string.gmatch(s, p) do\n"
    "      n = n + 1; r[#r + 1] = tostring(a) .. ',' .. tostring(b); if n > 50 then break end\n"
    "    end\n"
    "    return table.concat(r, ';')\n"
    "  end))\n"
    "elseif fn == 'gsubf' then\n"
    "  return ser(pcall(string.gsub, s, p, function(a) return a and '<' .. a .. '>' end, a4))\n"
    "elseif fn == 'gsubt' then\n"
    "  return ser(pcall(string.gsub, s, p, { a = 'A', ab = false, [1] = 'one' }, a4))\n"
    "end\n"
    "return ser(pcall(string[fn], s, p, a3, a4))\n";

static void pattern_run(lua_State *L, char *out, size_t outlen, const char *fn, const char *s,
                        size_t ls, const char *p, size_t lp, int a3, int a4)
{
    lua_settop(L, 0);
    assert_int_equal(luaL_loadbuffer(L, PATTERN_RUN, sizeof PATTERN_RUN - 1, "=run"), 0);
    lua_pushstring(L, fn);
    lua_pushlstring(L, s, ls);
    lua_pushlstring(L, p, lp);
    if (strcmp(fn, "gsub") == 0)
        lua_pushstring(L, a3 & 1 ? "<%0|%1>" : "x%%y%2");
    else if (a3 % 3 == 0)
        lua_pushnil(L);
    else
        lua_pushinteger(L, a3 % 17 - 8);
    if (a4 % 3 == 0)
        lua_pushnil(L);
    else if (a4 % 3 == 1 || strncmp(fn, "gsub", 4) == 0)
        lua_pushinteger(L, a4 % 4);
    else
        lua_pushboolean(L, a4 & 4);
    assert_int_equal(lua_pcall(L, 5, 1, 0), 0);
    size_t n;
    const char *res = lua_tolstring(L, -1, &n);
    snprintf(out, outlen, "%.*s", (int)n, res);
}

static void test_patterns_match_luajit(void **state)
{
    (void)state;
    static const char *const atoms[] = {
        "a", "b", ".", "%a", "%d", "%s", "%w", "%A", "[ab]", "[^a]", "[a-c]", "[%d-]", "[]a]",
        "[^]]", "*", "+", "-", "?", "(", ")", "()", "%1", "%2", "%b()", "%bab", "%f[%w]",
        "%f[%W]", "^", "$", "%", "[", "x", "%%", "%.", "]", "%z", "%b"};
    static const char *const pieces[] = {"a", "b", "ab", "(", ")", " ", "1", "x", "-", "]", "%"};
    static const char *const fns[] = {"find", "match", "gmatch", "gsub", "gsubf", "gsubt"};
    lua_State *mine = um_lua_sandbox_new(UM_LUA_SANDBOX_REQUEST, 64u << 20);
    lua_State *luajit = luaL_newstate();
    luaL_openlibs(luajit);
    unsigned seed = 14;
    for (int it = 0; it < 20000; it++) {
        char p[64], s[64];
        size_t lp = 0, ls = 0;
        for (int i = rand_r(&seed) % 7; i > 0; i--) {
            const char *a = atoms[rand_r(&seed) % UM_NELEMS(atoms)];
            if (lp + strlen(a) < sizeof p) {
                memcpy(p + lp, a, strlen(a));
                lp += strlen(a);
            }
        }
        for (int i = rand_r(&seed) % 12; i > 0; i--) {
            const char *a = pieces[rand_r(&seed) % UM_NELEMS(pieces)];
            memcpy(s + ls, a, strlen(a));
            ls += strlen(a);
        }
        if (rand_r(&seed) % 8 == 0)
            s[ls++] = '\0'; /* a NUL in the subject (LuaJIT's patterns end at one) */
        const char *fn = fns[rand_r(&seed) % UM_NELEMS(fns)];
        int a3 = rand_r(&seed), a4 = rand_r(&seed);
        char want[2048], got[2048];
        pattern_run(luajit, want, sizeof want, fn, s, ls, p, lp, a3, a4);
        pattern_run(mine, got, sizeof got, fn, s, ls, p, lp, a3, a4);
        if (strcmp(want, got) != 0)
            fail_msg("string.%s(\"%.*s\", \"%.*s\"): LuaJIT: %s, the sandbox: %s", fn, (int)ls, s,
                     (int)lp, p, want, got);
    }
    lua_close(luajit);
    um_lua_sandbox_close(mine);

    char msg[512];
    assert_int_not_equal(sandbox_run(1u << 20, "string.rep('a', 3000):find('.-.-.-.-b')\n", msg,
                                     sizeof msg),
                         0);
    assert_non_null(strstr(msg, ":1: instruction budget of 1000000 exceeded (in a pattern match)"));
    /* Caught, it stops the script at its next instruction. */
    assert_int_not_equal(sandbox_run(1u << 20,
                                     "for i = 1, 100 do\n"
                                     "  pcall(string.find, string.rep('a', 3000), '.-.-.-.-b')\n"
                                     "end\n",
                                     msg, sizeof msg),
                         0);
    assert_non_null(strstr(msg, "instruction budget of 1000000 exceeded (endless loop?)"));
}

/* A hook past limits.lua_memory fails; its state is made anew, with its memory back and its
 * globals started over, and the next request is served. */
static void test_state_made_anew_past_the_cap(void **state)
{
    (void)state;
    struct um_config *c = load("limits = { lua_memory = '4MB' }\n"
                               "local kept = {}\n"
                               "routes = { { path = '/', on_request = function(req)\n"
                               "  if req.path == '/grow' then\n"
                               "    kept[#kept + 1] = string.rep('k', 256 * 1024) .. #kept\n"
                               "  end\n"
                               "  return umbra.respond(200, tostring(#kept))\n"
                               "end } }\n");
    assert_int_equal(c->limits.lua_memory, 4u << 20);
    struct parsed p;
    int served = 0;
    for (;;) {
        parse(&p, "GET /grow HTTP/1.1\r\nHost: h\r\n\r\n", c);
        enum um_hook_result r = um_hooks_on_request(&ctx, hooks, &p.hr);
        um_arena_reset(&p.arena);
        if (r == UM_HOOK_FAIL)
            break;
        assert_int_equal(r, UM_HOOK_ANSWER);
        assert_true(++served < 40);
    }
    assert_true(served >= 4);
    assert_true(um_lua_sandbox_memory(hooks->states[0]->L) < (1u << 20));
    parse(&p, "GET / HTTP/1.1\r\nHost: h\r\n\r\n", c);
    assert_int_equal(um_hooks_on_request(&ctx, hooks, &p.hr), UM_HOOK_ANSWER);
    assert_true(str_is(p.hr.resp_body, "0"));
    um_arena_reset(&p.arena);
    unload(c);
}

static void test_lua_memory_setting(void **state)
{
    (void)state;
    assert_non_null(strstr(load_error("limits = { lua_memory = '512KB' }\n"
                                      "routes = { { path = '/', root = '.' } }\n"),
                           "1: limits.lua_memory: 524288 bytes is out of range"));
    assert_non_null(strstr(load_error("routes = { { path = '/', root = '.' } }\n"
                                      "limits = {\n  lua_memory = 'lots' }\n"),
                           "3: limits.lua_memory: bad size"));
}

/* Issue #26: HTTP/2 joined empty cookie crumbs into an empty um_buf, whose base is NULL,
 * and memcpy got that NULL (a UBSan report under the sanitizer build). */
static void test_arena_strdup_of_nothing(void **state)
{
    (void)state;
    struct um_arena a = {0};
    const char *volatile none = NULL; /* not a constant the compiler folds away */
    char *p = um_arena_strdup(&a, none, 0);
    assert_non_null(p);
    assert_string_equal(p, "");
    um_arena_reset(&a);
}

static void test_fold_shifts(void **state)
{
    (void)state;
    const char *src = "a = 1 << 25 -- 1 << 2\nb = '2 << 3'\nc = 256 >> 4\nd = x << 2\n";
    size_t n;
    char *out = um__lua_fold_shifts(src, strlen(src), &n);
    assert_non_null(out);
    assert_int_equal(n, strlen("a = 33554432 -- 1 << 2\nb = '2 << 3'\nc = 16\nd = x << 2\n"));
    assert_memory_equal(out, "a = 33554432 -- 1 << 2\nb = '2 << 3'\nc = 16\nd = x << 2\n", n);
    free(out);
    assert_null(um__lua_fold_shifts("a = 1 < 2\n", 10, &n));
}

/* Lua 5.3's shifts bind looser than arithmetic and concatenation: "1 << 2 + 1" is 8, not 4 + 1.
 * Such a shift stays as written (LuaJIT rejects it), rather than folding into another value. */
static void test_fold_shifts_keeps_precedence(void **state)
{
    (void)state;
    const char *src = "a = 1 << 2 + 1\nb = 3 * 1 << 4\nc = 'x' .. 1 << 2\nd = 2 ^ 1 << 3\n"
                      "e = -1 >> 1\nf = 1 << 4 < 17\ng = (1 << 3)\n";
    const char *want = "a = 1 << 2 + 1\nb = 3 * 1 << 4\nc = 'x' .. 1 << 2\nd = 2 ^ 1 << 3\n"
                       "e = -1 >> 1\nf = 16 < 17\ng = (8)\n";
    size_t n;
    char *out = um__lua_fold_shifts(src, strlen(src), &n);
    assert_non_null(out);
    assert_int_equal(n, strlen(want));
    assert_memory_equal(out, want, n);
    free(out);
    assert_null(um__lua_fold_shifts("a = 1 << 2 + 1\n", 15, &n));
}

int main(void)
{
    um_modules_init(); /* the modules' settings, as the server's main does */
    um_context_init(&ctx, NULL, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rewrites),
        cmocka_unit_test(test_respond_and_redirect),
        cmocka_unit_test(test_hostname_without_host),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_on_response),
        cmocka_unit_test(test_yunying),
        cmocka_unit_test(test_states_made_at_load),
        cmocka_unit_test(test_sandbox_library),
        cmocka_unit_test(test_sandbox_budget_and_cap),
        cmocka_unit_test(test_patterns_match_luajit),
        cmocka_unit_test(test_state_made_anew_past_the_cap),
        cmocka_unit_test(test_lua_memory_setting),
        cmocka_unit_test(test_arena_strdup_of_nothing),
        cmocka_unit_test(test_fold_shifts),
        cmocka_unit_test(test_fold_shifts_keeps_precedence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
