/* Unit tests of the config loader (src/config/) and its line finder. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "config/internal.h"
#include "config/lualines.h"
#include "umbra/config.h"
#include "umbra/cache.h"
#include "umbra/cgi.h"
#include "umbra/compress.h"
#include "umbra/module.h"
#include "umbra/log.h"
#include "umbra/tls.h"

static char tmpdir[] = "/tmp/umbra-test-config-XXXXXX";
static char realdir[PATH_MAX]; /* tmpdir after realpath (in case /tmp is a link) */
static char cfgpath[PATH_MAX];

static const char *join_path(char *buf, size_t n, const char *dir, const char *name)
{
    int w = snprintf(buf, n, "%s/%s", dir, name);
    assert_true(w > 0 && (size_t)w < n);
    return buf;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

static void make_dir(const char *name)
{
    char p[PATH_MAX];
    assert_int_equal(mkdir(join_path(p, sizeof p, tmpdir, name), 0755), 0);
}

static void make_tls_files(void);

static int group_setup(void **state)
{
    if (mkdtemp(tmpdir) == NULL || realpath(tmpdir, realdir) == NULL)
        return -1;
    make_dir("www");
    make_dir("static");
    make_dir("sub");
    char p[PATH_MAX];
    write_file(join_path(p, sizeof p, tmpdir, "afile"), "x");
    write_file(join_path(p, sizeof p, tmpdir, "ca.pem"), "not really a certificate\n");
    make_tls_files();
    join_path(cfgpath, sizeof cfgpath, tmpdir, "config.lua");
    return 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static int group_teardown(void **state)
{
    return nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Writes text as config.lua in the temp dir and loads it. */
static struct um_config *load(const char *text, char *err, size_t errlen)
{
    write_file(cfgpath, text);
    return um_config_load(cfgpath, err, errlen);
}

static struct um_config *load_ok(const char *text)
{
    char err[1024] = "";
    struct um_config *c = load(text, err, sizeof err);
    if (c == NULL)
        fail_msg("unexpected error: %s", err);
    return c;
}

/* Asserts that loading file (already written) fails with "file:line: " (or "file: " when
 * line is 0) and a message containing needle. */
static void expect_file_error(const char *file, int line, const char *needle)
{
    char err[1024] = "", prefix[PATH_MAX + 32];
    struct um_config *c = um_config_load(file, err, sizeof err);
    if (c != NULL) {
        um_config_unref(c);
        fail_msg("loaded, but expected an error mentioning '%s'", needle);
    }
    if (line > 0)
        snprintf(prefix, sizeof prefix, "%s:%d: ", file, line);
    else
        snprintf(prefix, sizeof prefix, "%s: ", file);
    if (strncmp(err, prefix, strlen(prefix)) != 0)
        fail_msg("error '%s' does not start with '%s'", err, prefix);
    if (needle != NULL && strstr(err, needle) == NULL)
        fail_msg("error '%s' does not mention '%s'", err, needle);
}

static void expect_error(const char *text, int line, const char *needle)
{
    write_file(cfgpath, text);
    expect_file_error(cfgpath, line, needle);
}

static const char *in_tmp(const char *name)
{
    static char buf[PATH_MAX];
    return join_path(buf, sizeof buf, realdir, name);
}

/* --- valid configs ----------------------------------------------------------------- */

static void test_full_config(void **state)
{
    char www[PATH_MAX];
    snprintf(www, sizeof www, "%s", in_tmp("www"));
    char text[PATH_MAX + 4096];
    snprintf(text, sizeof text,
             "-- a full config\n"
             "listen  = { \"127.0.0.1:8080\", \"[::1]:8081\", \"*:0\", \"localhost:9\" }\n"
             "workers = 2\n"
             "routes  = {\n"
             "  { host = \"Example.COM\", path = \"/static/\", root = \"%s\" },\n"
             "  { path = \"/\", root = \"www\", index = false },\n"
             "  {\n"
             "    path = \"/x/\", root = \"static\", index = \"home.htm\",\n"
             "  },\n"
             "}\n"
             "limits   = { max_connections = 500, max_header_bytes = \"32KB\",\n"
             "             max_body_bytes = \"1GB\", max_request_line = 4096 }\n"
             "timeouts = { header = 2.5, idle = 30, send = 5, shutdown = 0.25 }\n"
             "mime     = { wasm = \"application/wasm\", [\"MD\"] = \"text/markdown; charset=utf-8\" }\n"
             "log_level = \"debug\"\n"
             "function on_request(r) return nil end\n"
             "local helper = 3\n",
             in_tmp("static"));
    struct um_config *c = load_ok(text);

    assert_string_equal(c->file, cfgpath);
    assert_int_equal(c->num_listen, 4);
    const struct sockaddr_in *a = (const struct sockaddr_in *)&c->listen[0].addr;
    assert_int_equal(a->sin_family, AF_INET);
    assert_int_equal(ntohs(a->sin_port), 8080);
    assert_int_equal(ntohl(a->sin_addr.s_addr), INADDR_LOOPBACK);
    assert_int_equal(c->listen[0].addrlen, sizeof(struct sockaddr_in));
    assert_string_equal(c->listen[0].text, "127.0.0.1:8080");
    const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)&c->listen[1].addr;
    assert_int_equal(a6->sin6_family, AF_INET6);
    assert_int_equal(ntohs(a6->sin6_port), 8081);
    assert_memory_equal(&a6->sin6_addr, &in6addr_loopback, sizeof in6addr_loopback);
    assert_int_equal(c->listen[1].addrlen, sizeof(struct sockaddr_in6));
    a = (const struct sockaddr_in *)&c->listen[2].addr;
    assert_int_equal(ntohl(a->sin_addr.s_addr), INADDR_ANY);
    assert_int_equal(ntohs(a->sin_port), 0);
    a = (const struct sockaddr_in *)&c->listen[3].addr;
    assert_int_equal(ntohl(a->sin_addr.s_addr), INADDR_LOOPBACK);
    assert_int_equal(ntohs(a->sin_port), 9);

    assert_int_equal(c->workers, 2);

    assert_int_equal(c->num_routes, 3);
    assert_string_equal(c->routes[0].host, "example.com");
    assert_string_equal(c->routes[0].path, "/static/");
    assert_string_equal(c->routes[0].root, in_tmp("static"));
    assert_string_equal(c->routes[0].index, "index.html");
    assert_int_equal(c->routes[0].line, 5);
    assert_null(c->routes[1].host);
    assert_string_equal(c->routes[1].root, www);
    assert_null(c->routes[1].index);
    assert_int_equal(c->routes[1].line, 6);
    assert_string_equal(c->routes[2].index, "home.htm");
    assert_int_equal(c->routes[2].line, 7);

    assert_int_equal(c->limits.max_connections, 500);
    assert_int_equal(c->limits.max_header_bytes, 32 * 1024);
    assert_int_equal(c->limits.max_body_bytes, 1ull << 30);
    assert_int_equal(c->limits.max_request_line, 4096);

    assert_true(c->timeouts.header == 2.5);
    assert_true(c->timeouts.idle == 30);
    assert_true(c->timeouts.send == 5);
    assert_true(c->timeouts.shutdown == 0.25);

    assert_int_equal(c->num_mime, 2);
    assert_string_equal(c->mime[0].ext, "md"); /* lower-cased, sorted */
    assert_string_equal(c->mime[0].type, "text/markdown; charset=utf-8");
    assert_string_equal(c->mime[1].ext, "wasm");
    assert_string_equal(c->mime[1].type, "application/wasm");

    assert_int_equal(c->log_level, UM_LOG_DEBUG);
    um_config_unref(c);
}

static void test_defaults(void **state)
{
    struct um_config *c = load_ok("routes = { { path = \"/\", root = \"www\" } }\n");
    assert_int_equal(c->num_listen, 1);
    assert_string_equal(c->listen[0].text, "127.0.0.1:8080");
    const struct sockaddr_in *a = (const struct sockaddr_in *)&c->listen[0].addr;
    assert_int_equal(a->sin_family, AF_INET);
    assert_int_equal(ntohs(a->sin_port), 8080);
    assert_int_equal(ntohl(a->sin_addr.s_addr), INADDR_LOOPBACK);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    assert_int_equal(c->workers, cpus < 1 ? 1 : cpus > 256 ? 256 : cpus);
    assert_int_equal(c->limits.max_connections, 10000);
    assert_int_equal(c->limits.max_header_bytes, 16384);
    assert_int_equal(c->limits.max_body_bytes, 16 * 1024 * 1024);
    assert_int_equal(c->limits.max_request_line, 8192);
    assert_true(c->timeouts.header == 10);
    assert_true(c->timeouts.idle == 60);
    assert_true(c->timeouts.send == 30);
    assert_true(c->timeouts.shutdown == 10);
    assert_int_equal(c->num_mime, 0);
    assert_int_equal(c->log_level, UM_LOG_INFO);
    assert_int_equal(c->num_routes, 1);
    assert_null(c->routes[0].host);
    assert_string_equal(c->routes[0].index, "index.html");
    assert_int_equal(c->routes[0].line, 1);
    um_config_unref(c);
}

/* Issue #26: the README's defaults, written here as the README's numbers (not the code's
 * constants), so that a changed default without a changed README fails. */
static void test_readme_defaults(void **state)
{
    (void)state;
    struct um_config *c = load_ok("compress = true\nroutes = { { path = \"/\", root = \"www\" } }\n");
    const struct um_cgi_conf *cgi = um_config_part(c, &um_cgi_settings);
    assert_int_equal(cgi->max_children, 64);
    assert_true(cgi->timeout == 30);
    assert_true(c->timeouts.tunnel == 3600);
    const struct um_compress_conf *cc = um_config_part(c, &um_compress_settings);
    const struct um_compress_conf *rc = um_compress_route_conf(&c->routes[0]);
    assert_true(cc->enabled);
    assert_int_equal(cc->level[UM_CODING_GZIP], 6);
    assert_int_equal(cc->level[UM_CODING_BR], 4);
    assert_int_equal(cc->level[UM_CODING_ZSTD], 3);
    /* A route's own table starts from the same levels. */
    assert_int_equal(rc->level[UM_CODING_GZIP], 6);
    assert_int_equal(rc->level[UM_CODING_BR], 4);
    assert_int_equal(rc->level[UM_CODING_ZSTD], 3);
    um_config_unref(c);
}

/* README: compress.types, "at most 32": 32 load, 33 are an error naming file:line. */
static void test_compress_types_at_most_32(void **state)
{
    (void)state;
    char text[4096], list[3000];
    for (int n = 32; n <= 33; n++) {
        size_t len = 0;
        for (int i = 0; i < n; i++)
            len += (size_t)snprintf(list + len, sizeof list - len, "\"text/t%d\", ", i);
        snprintf(text, sizeof text,
                 "routes = { { path = \"/\", root = \"www\" } }\n"
                 "compress = {\n  types = { %s },\n}\n", list);
        if (n == 32) {
            struct um_config *c = load_ok(text);
            const struct um_compress_conf *cc = um_config_part(c, &um_compress_settings);
            assert_int_equal(cc->num_types, 32);
            assert_string_equal(cc->types[31], "text/t31");
            um_config_unref(c);
        } else {
            expect_error(text, 3, "at most 32 types");
        }
    }
}

static void test_relative_root(void **state)
{
    char sub[PATH_MAX], cwd[PATH_MAX];
    /* Relative to the config file's directory, not to the working directory. */
    join_path(sub, sizeof sub, tmpdir, "sub/config.lua");
    write_file(sub, "routes = { { path = '/', root = '../www' }, { path = '/s/', root = '.' } }\n");
    char err[1024];
    struct um_config *c = um_config_load(sub, err, sizeof err);
    if (c == NULL)
        fail_msg("%s", err);
    assert_string_equal(c->routes[0].root, in_tmp("www"));
    assert_string_equal(c->routes[1].root, in_tmp("sub"));
    um_config_unref(c);

    /* A bare file name: relative to the working directory, which is its directory. */
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(tmpdir), 0);
    write_file("config.lua", "routes = { { path = '/', root = 'www/' } }\n");
    c = um_config_load("config.lua", err, sizeof err);
    assert_int_equal(chdir(cwd), 0);
    if (c == NULL)
        fail_msg("%s", err);
    assert_string_equal(c->file, "config.lua");
    assert_string_equal(c->routes[0].root, in_tmp("www"));
    um_config_unref(c);
}

static void test_sizes_in_config(void **state)
{
    struct um_config *c = load_ok("routes = { { path = '/', root = 'www' } }\n"
                                  "limits = { max_body_bytes = '512k', max_header_bytes = '1M',\n"
                                  "           max_request_line = '100' }\n");
    assert_int_equal(c->limits.max_body_bytes, 512 * 1024);
    assert_int_equal(c->limits.max_header_bytes, 1024 * 1024);
    assert_int_equal(c->limits.max_request_line, 100);
    um_config_unref(c);
    c = load_ok("routes = { { path = '/', root = 'www' } }\n"
                "limits = { max_body_bytes = 0 }\n");
    assert_int_equal(c->limits.max_body_bytes, 0);
    um_config_unref(c);
}

static void test_parse_size(void **state)
{
    uint64_t v = 7;
    assert_true(um_config_parse_size("0", &v));
    assert_int_equal(v, 0);
    assert_true(um_config_parse_size("512", &v));
    assert_int_equal(v, 512);
    assert_true(um_config_parse_size("512KB", &v));
    assert_int_equal(v, 512 * 1024);
    assert_true(um_config_parse_size("512K", &v));
    assert_int_equal(v, 512 * 1024);
    assert_true(um_config_parse_size("512k", &v));
    assert_int_equal(v, 512 * 1024);
    assert_true(um_config_parse_size("16MB", &v));
    assert_int_equal(v, 16 * 1024 * 1024);
    assert_true(um_config_parse_size("16M", &v));
    assert_int_equal(v, 16 * 1024 * 1024);
    assert_true(um_config_parse_size("16mb", &v));
    assert_int_equal(v, 16 * 1024 * 1024);
    assert_true(um_config_parse_size("1GB", &v));
    assert_int_equal(v, 1ull << 30);
    assert_true(um_config_parse_size("1G", &v));
    assert_int_equal(v, 1ull << 30);
    assert_true(um_config_parse_size("18446744073709551615", &v));
    assert_true(v == UINT64_MAX);
    assert_true(um_config_parse_size("17179869183G", &v)); /* (2^64 - 1) >> 30 */

    v = 42;
    static const char *const bad[] = {
        "", "-1", "+1", "1.5", "1.0", "0x10", "abc", "KB", "12MBx", "12 MB", " 12", "12 ",
        "1TB", "12B", "1e3", "18446744073709551616", "17179869184G", "99999999999999999999K",
        "16777216TB"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (um_config_parse_size(bad[i], &v))
            fail_msg("accepted '%s'", bad[i]);
    assert_int_equal(v, 42); /* untouched on failure */
    assert_false(um_config_parse_size(NULL, &v));
}

/* (What is built from a snapshot, its routes' origins, is the runtime's: test_runtime.c
 * checks that they go with it.) */
static void test_refcount(void **state)
{
    struct um_config *c = load_ok("routes = { { path = '/a/', root = 'www' },\n"
                                  "           { path = '/', root = 'www' } }\n");
    const struct um_config *k = c; /* a holder that only reads, such as a cache fill */
    um_config_ref(c);
    um_config_ref(k);
    assert_int_equal(um_config_refs(c), 3);
    um_config_unref(k);
    um_config_unref(c);
    assert_int_equal(um_config_refs(c), 1);
    um_config_unref(c); /* the last one: frees (ASan would see a leak otherwise) */
}

/* Loads and drops configs on every path, success and failure alike; under ASan the leak
 * checker then reports anything the loader forgot to free. */
static void test_no_leaks(void **state)
{
    static const char *const texts[] = {
        "routes = { { path = '/', root = 'www' } }\n"
        "mime = { a = 'x/a', b = 'x/b' } listen = { '127.0.0.1:1', '[::1]:2' }\n",
        "routes = { { path = '/', root = 'www' }, { path = '/x', root = 'nope' } }\n",
        "mime = { a = 'x/a', A = 'x/b' } routes = { { path = '/', root = 'www' } }\n",
        "listen = { '127.0.0.1:1', 'bad' } routes = { { path = '/', root = 'www' } }\n",
        "routes = {\n",
        "error('x')\n",
        "x = 1\n",
        "while true do end\n",
        "upstreams = { a = { servers = { 'http://a', 'https://b' }, host = 'x',\n"
        "  tls = { ca = 'ca.pem' } }, b = { servers = 'http://c' } }\n"
        "routes = { { path = '/', upstream = 'b' }, { path = '/s/', root = 'www' } }\n",
        "upstreams = { a = { servers = { 'http://a', 'https://b' }, host = 'x',\n"
        "  tls = { ca = 'ca.pem' } }, b = { servers = { 'http://c', 'http://c/x' } } }\n"
        "routes = { { path = '/', upstream = 'b' } }\n",
        "upstreams = { a = { servers = { 'http://a', 'http://A:80' } } }\n"
        "routes = { { path = '/', upstream = 'a' } }\n",
        "upstreams = { a = { servers = 'http://a', tls = { ca = 'nope' } } }\n"
        "routes = { { path = '/', upstream = 'a' } }\n",
        "upstreams = { a = { servers = 'http://a' }, ['1'] = {} }\n"
        "routes = { { path = '/', upstream = 'a' } }\n",
        "upstreams = { a = { servers = 'http://a' } }\n"
        "routes = { { path = '/', upstream = 'a' }, { path = '/b', upstream = 'b' } }\n",
        "routes = { { path = '/', root = 'www' } }\n"
        "cache = { purge = { allow = { '10.0.0.0/8', '::1', 'fd00::/8' } } }\n",
        "routes = { { path = '/', root = 'www' } }\n"
        "cache = { purge = { allow = { '10.0.0.0/8', '::1', '10.0.0.1/8' } } }\n",
        "routes = { { path = '/', root = 'www' } }\n"
        "cache = { purge = { allow = { '10.0.0.0/8', '10.0.0.0/8' } } }\n",
        "routes = { { path = '/', root = 'www' } }\n"
        "cache = { memory = '1MB', purge = { allow = {} } }\n",
        "routes = { { path = '/', root = 'www' } }\ncache = { memory = 1 }\n",
        "routes = { { path = '/', root = 'www', cache = true } }\ncache = {}\n",
    };
    char err[256];
    for (int round = 0; round < 3; round++)
        for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
            struct um_config *c = load(texts[i], err, sizeof err);
            if (c != NULL)
                um_config_unref(c);
        }
}

/* --- errors ------------------------------------------------------------------------ */

static void test_err_syntax(void **state)
{
    expect_error("workers = 2\n"
                 "routes = {\n"
                 "  { path = '/' root = 'www' },\n"
                 "}\n",
                 3, "'}' expected");
}

static void test_err_runtime(void **state)
{
    expect_error("workers = 2\n"
                 "local x = 1\n"
                 "error(\"boom\")\n",
                 3, "boom");
    expect_error("routes = { { path = '/', root = 'www' } }\n"
                 "local t = nil\n"
                 "\n"
                 "print(t.x)\n",
                 4, "attempt to index");
    /* No position: still names the file. */
    expect_error("error('plain', 0)\n", 0, "plain");
    expect_error("\n\nerror({ code = 1 })\n", 0, "table");
}

static void test_err_long_file_name(void **state)
{
    /* LuaJIT shortens long chunk names to "...tail"; the full name must come back. */
    char dir[PATH_MAX], file[PATH_MAX];
    join_path(dir, sizeof dir, tmpdir,
              "a-directory-name-long-enough-to-be-shortened-by-luajit-in-its-messages");
    assert_int_equal(mkdir(dir, 0755), 0);
    join_path(file, sizeof file, dir, "config.lua");
    write_file(file, "\nerror('boom')\n");
    expect_file_error(file, 2, "boom");
    write_file(file, "routes = {\n  { path = '/' root = 'www' },\n}\n");
    expect_file_error(file, 2, "expected");
    write_file(file, "routes = { { path = '/', root = 'www' } }\nwokers = 3\n");
    expect_file_error(file, 2, "unknown setting 'wokers'");
}

static void test_err_missing_file(void **state)
{
    const char *file = "/nonexistent/umbra/config.lua";
    expect_file_error(file, 0, "No such file");
}

static void test_err_unknown_setting(void **state)
{
    expect_error("routes = { { path = '/', root = 'www' } }\n"
                 "worker = 4\n",
                 2, "unknown setting 'worker'");
    /* Functions (request hooks) are allowed; so are locals. */
    struct um_config *c = load_ok("local x = 1\n"
                                  "function on_request(r) end\n"
                                  "on_response = function(r) end\n"
                                  "routes = { { path = '/', root = 'www' } }\n");
    um_config_unref(c);
    /* Assigned from a loop: the line comes from the __newindex record. */
    expect_error("routes = { { path = '/', root = 'www' } }\n"
                 "for _, n in ipairs({ 'a' }) do\n"
                 "  _G[n .. 'bc'] = 1\n"
                 "end\n",
                 3, "unknown setting 'abc'");
}

/* Issue #26: the list of settings was cut by a fixed-size buffer ("..., compress, clu, user,
 * group"). The message must name every top-level setting the loader knows, and still start
 * with file:line. */
static void test_err_unknown_setting_names_every_setting(void **state)
{
    char err[4096] = "", prefix[PATH_MAX + 64];
    write_file(cfgpath, "routes = { { path = '/', root = 'www' } }\nworker = 4\n");
    struct um_config *c = um_config_load(cfgpath, err, sizeof err);
    assert_null(c);
    snprintf(prefix, sizeof prefix, "%s:2: unknown setting 'worker' (settings are: ", cfgpath);
    if (strncmp(err, prefix, strlen(prefix)) != 0)
        fail_msg("error '%s' does not start with '%s'", err, prefix);
    const char *list = err + strlen(prefix);
    const char *end = strchr(list, ';');
    assert_non_null(end);
    /* The named list, split on ", ", is exactly the known settings, in order. */
    const char *modules[UM_SETTINGS_MAX + 1] = {NULL};
    for (size_t i = 0; um_settings_registered(i); i++)
        modules[i] = um_settings_registered(i)->global;
    const char *const *known[] = {um__cfg_settings, modules, um__cfg_process};
    const char *p = list;
    size_t count = 0;
    for (size_t k = 0; k < 3; k++)
        for (const char *const *s = known[k]; *s; s++, count++) {
            size_t n = strlen(*s);
            if (strncmp(p, *s, n) != 0 || (p[n] != ',' && p[n] != ';'))
                fail_msg("setting '%s' is missing from '%.*s'", *s, (int)(end - list), list);
            p += n;
            if (*p == ',')
                p += 2;
        }
    assert_ptr_equal(p, end);
    assert_true(count > 15);
}

/* Issue #26: the same for the list of upstreams an unknown one is compared to, whatever
 * their number. */
static void test_err_unknown_upstream_names_every_upstream(void **state)
{
    char text[8192], err[8192] = "", name[64];
    size_t off = (size_t)snprintf(text, sizeof text, "upstreams = {\n");
    for (int i = 0; i < 40; i++)
        off += (size_t)snprintf(text + off, sizeof text - off,
                                "  upstream_with_a_long_name_%02d = { servers = { "
                                "'http://127.0.0.1:9' } },\n",
                                i);
    snprintf(text + off, sizeof text - off,
             "}\nroutes = {\n  { path = '/', upstream = 'nope' },\n}\n");
    write_file(cfgpath, text);
    assert_null(um_config_load(cfgpath, err, sizeof err));
    assert_non_null(strstr(err, ":44: routes.1.upstream: unknown upstream 'nope'"));
    for (int i = 0; i < 40; i++) {
        snprintf(name, sizeof name, "upstream_with_a_long_name_%02d", i);
        if (strstr(err, name) == NULL)
            fail_msg("'%s' is missing from '%s'", name, err);
    }
    assert_non_null(strstr(err, "_39)"));
}

/* pid = "FILE" (issue #26): kept absolute, relative to the file's folder; a missing
 * folder or a bad value is an error at its line. */
static void test_pid_file(void **state)
{
    char want[PATH_MAX];
    struct um_config *c = load_ok("routes = { { path = '/', root = 'www' } }\n");
    assert_null(c->pid_file);
    um_config_unref(c);
    c = load_ok("routes = { { path = '/', root = 'www' } }\npid = 'sub/umbra.pid'\n");
    join_path(want, sizeof want, realdir, "sub/umbra.pid");
    assert_non_null(c->pid_file);
    assert_string_equal(c->pid_file, want);
    assert_int_equal(c->pid_line, 2);
    um_config_unref(c);
    expect_error("routes = { { path = '/', root = 'www' } }\n\npid = 'nowhere/umbra.pid'\n", 3,
                 "pid: no such");
    expect_error("routes = { { path = '/', root = 'www' } }\npid = 42\n", 2, "pid: expected");
    expect_error("routes = { { path = '/', root = 'www' } }\npid = 'sub/'\n", 2,
                 "names a folder");
}

static void test_err_unknown_route_key(void **state)
{
    expect_error("routes = {\n"
                 "  {\n"
                 "    path = '/',\n"
                 "    roots = 'www',\n"
                 "  },\n"
                 "}\n",
                 4, "unknown key 'roots'");
    expect_error("routes = {\n"
                 "  { path = '/', root = 'www' },\n"
                 "  { '/', 'www' },\n"
                 "}\n",
                 3, "routes.2");
    expect_error("routes = { { path = '/', root = 'www' } }\n"
                 "limits = {\n"
                 "  max_conns = 3 }\n",
                 3, "unknown key 'max_conns'");
    expect_error("routes = { { path = '/', root = 'www' } }\n"
                 "timeouts = { idle = 3,\n"
                 "  [\"heder\"] = 3 }\n",
                 3, "unknown key 'heder'");
}

static void test_err_workers(void **state)
{
    expect_error("routes = { { path = '/', root = 'www' } }\n"
                 "workers = '2'\n",
                 2, "workers: expected an integer from 1 to 256");
    expect_error("routes = { { path = '/', root = 'www' } }\n\n"
                 "workers = 0\n",
                 3, "workers: expected an integer from 1 to 256");
    expect_error("workers = 1.5\nroutes = { { path = '/', root = 'www' } }\n", 1,
                 "workers: expected an integer");
    expect_error("workers = 257\nroutes = { { path = '/', root = 'www' } }\n", 1,
                 "workers: expected an integer");
}

static void test_err_listen(void **state)
{
    expect_error("routes = { { path = '/', root = 'www' } }\n"
                 "listen = {\n"
                 "  '127.0.0.1:8080',\n"
                 "  '300.1.1.1:8080',\n"
                 "}\n",
                 4, "'300.1.1.1:8080'");
    expect_error("routes = { { path = '/', root = 'www' } }\n"
                 "listen = { 'example.com:80' }\n",
                 2, "bad address 'example.com:80'");
    expect_error("listen = { '::1:80' }\nroutes = { { path = '/', root = 'www' } }\n", 1,
                 "brackets");
    expect_error("listen = { '[::1]80' }\nroutes = { { path = '/', root = 'www' } }\n", 1,
                 "bad address '[::1]80'");
    expect_error("listen = { '127.0.0.1' }\nroutes = { { path = '/', root = 'www' } }\n", 1,
                 "bad address");
    expect_error("listen = 8080\nroutes = { { path = '/', root = 'www' } }\n", 1,
                 "listen: expected");
    expect_error("listen = {}\nroutes = { { path = '/', root = 'www' } }\n", 1,
                 "at least one");
    expect_error("listen = { '*:80', '0.0.0.0:80' }\nroutes = { { path = '/', root = 'www' } }\n",
                 1, "twice");
}

static void test_err_port(void **state)
{
    expect_error("routes = { { path = '/', root = 'www' } }\n"
                 "listen = { '127.0.0.1:70000' }\n",
                 2, "bad port in '127.0.0.1:70000'");
    expect_error("listen = { '127.0.0.1:' }\nroutes = { { path = '/', root = 'www' } }\n", 1,
                 "bad port");
    expect_error("listen = { '[::1]:8x' }\nroutes = { { path = '/', root = 'www' } }\n", 1,
                 "bad port");
    expect_error("listen = { '127.0.0.1:-1' }\nroutes = { { path = '/', root = 'www' } }\n", 1,
                 "bad port");
}

static void test_err_missing_root(void **state)
{
    expect_error("routes = {\n"
                 "  { path = '/static/', root = 'static' },\n"
                 "  { path = '/', root = 'nope' },\n"
                 "}\n",
                 3, "'nope'");
    expect_error("routes = {\n"
                 "  { path = '/static/', root = 'static' },\n"
                 "  { path = '/',\n"
                 "    root = '/nonexistent/dir' },\n"
                 "}\n",
                 4, "/nonexistent/dir");
    expect_error("routes = { { path = '/', root = 'afile' } }\n", 1, "not a directory");
}

static void test_err_route_without_path(void **state)
{
    expect_error("routes = {\n"
                 "  { path = '/a/', root = 'www' },\n"
                 "  {\n"
                 "    root = 'www',\n"
                 "  },\n"
                 "}\n",
                 3, "routes.2.path: missing");
    expect_error("routes = {\n  { path = '', root = 'www' },\n}\n", 2, "routes.1.path");
    expect_error("routes = {\n  { path = 'a/', root = 'www' },\n}\n", 2,
                 "does not start with \"/\"");
    expect_error("routes = {\n  { path = '/' },\n}\n", 2,
                 "routes.1: route needs root or upstream");
    expect_error("routes = {\n  { path = '/', root = 'www', index = true },\n}\n", 2,
                 "routes.1.index");
    expect_error("routes = {\n  { path = '/', root = 'www', host = 'a.com:80' },\n}\n", 2,
                 "routes.1.host");
    expect_error("routes = {\n  'www',\n}\n", 2, "routes.1: expected a route table");
}

static void test_err_routes_missing(void **state)
{
    expect_error("workers = 2\n", 0, "routes: missing");
    expect_error("workers = 2\nroutes = {}\n", 2, "routes: expected at least one route");
    expect_error("routes = 'www'\n", 1, "routes: expected");
}

static void test_err_size(void **state)
{
    expect_error("routes = { { path = '/', root = 'www' } }\n"
                 "limits = {\n"
                 "  max_connections = 10,\n"
                 "  max_body_bytes = '16XB',\n"
                 "}\n",
                 4, "bad size \"16XB\"");
    expect_error("routes = { { path = '/', root = 'www' } }\n"
                 "limits = { max_header_bytes = -1 }\n",
                 2, "limits.max_header_bytes");
    expect_error("routes = { { path = '/', root = 'www' } }\n"
                 "limits = { max_header_bytes = 0 }\n",
                 2, "limits.max_header_bytes");
    expect_error("routes = { { path = '/', root = 'www' } }\n"
                 "limits = { max_connections = '10' }\n",
                 2, "limits.max_connections");
    expect_error("routes = { { path = '/', root = 'www' } }\n"
                 "limits = 5\n",
                 2, "limits: expected a table");
}

static void test_err_timeout(void **state)
{
    expect_error("routes = { { path = '/', root = 'www' } }\n"
                 "timeouts = {\n"
                 "  header = 10,\n"
                 "  idle = 0,\n"
                 "}\n",
                 4, "timeouts.idle");
    expect_error("routes = { { path = '/', root = 'www' } }\n"
                 "timeouts = { send = '30' }\n",
                 2, "timeouts.send: expected a number of seconds");
    expect_error("routes = { { path = '/', root = 'www' } }\n"
                 "timeouts = { shutdown = 0/0 }\n",
                 2, "timeouts.shutdown");
}

static void test_err_mime_and_log_level(void **state)
{
    expect_error("routes = { { path = '/', root = 'www' } }\n"
                 "mime = {\n"
                 "  ['.md'] = 'text/markdown',\n"
                 "}\n",
                 3, "bad extension '.md'");
    expect_error("routes = { { path = '/', root = 'www' } }\n"
                 "mime = { md = 5 }\n",
                 2, "mime.md");
    expect_error("routes = { { path = '/', root = 'www' } }\n"
                 "mime = { md = 'markdown' }\n",
                 2, "bad media type");
    expect_error("routes = { { path = '/', root = 'www' } }\n"
                 "log_level = 'verbose'\n",
                 2, "log_level: expected one of: error, warn, info, debug");
}

static void test_err_endless_loop(void **state)
{
    time_t start = time(NULL);
    expect_error("routes = { { path = '/', root = 'www' } }\n"
                 "while true do end\n",
                 2, "instruction budget");
    /* Catching the error does not help the script. */
    expect_error("routes = { { path = '/', root = 'www' } }\n"
                 "for i = 1, 10 do\n"
                 "  pcall(function() while true do end end)\n"
                 "end\n",
                 2, "instruction budget");
    expect_error("local function f() return f() end\n"
                 "routes = { { path = '/', root = 'www' } }\n"
                 "f()\n",
                 1, "instruction budget");
    assert_true(time(NULL) - start < 20);
}

/* --- upstreams ---------------------------------------------------------------------- */

static void test_upstream_full(void **state)
{
    struct um_config *c = load_ok(
        "upstreams = {\n"                                                    /* 1 */
        "  app = {\n"                                                        /* 2 */
        "    servers = { \"http://127.0.0.1:9000\", \"http://127.0.0.1:9001\" },\n" /* 3 */
        "    balance = \"least_conn\",\n"                                    /* 4 */
        "    connect_timeout = 0.5, timeout = 12.5,\n"                       /* 5 */
        "    retries = 0,\n"                                                 /* 6 */
        "    host = \"app.internal:8443\",\n"                                /* 7 */
        "    tls = { verify = false, ca = \"ca.pem\" },\n"                   /* 8 */
        "    max_fails = 5, fail_timeout = 2.5, client = \"curl\",\n"        /* 9 */
        "  },\n"                                                             /* 10 */
        "  api = { servers = { \"https://api.example.com\" }, balance = \"hash\",\n" /* 11 */
        "          retries = 10, max_fails = 1 },\n"                         /* 12 */
        "}\n"                                                                /* 13 */
        "routes = {\n"                                                       /* 14 */
        "  { host = \"api.example.com\", path = \"/\", upstream = \"api\" },\n" /* 15 */
        "  { path = \"/static/\", root = \"www\" },\n"                       /* 16 */
        "  { path = \"/\", upstream = \"app\" },\n"                          /* 17 */
        "}\n");

    assert_int_equal(c->num_upstreams, 2);
    const struct um_upstream_conf *api = &c->upstreams[0], *app = &c->upstreams[1];
    assert_string_equal(api->name, "api"); /* sorted by name */
    assert_string_equal(app->name, "app");

    assert_int_equal(app->line, 2);
    assert_int_equal(app->num_servers, 2);
    assert_string_equal(app->servers[0].url, "http://127.0.0.1:9000");
    assert_false(app->servers[0].https);
    assert_string_equal(app->servers[1].url, "http://127.0.0.1:9001");
    assert_int_equal(app->balance, UM_BALANCE_LEAST_CONN);
    assert_true(app->connect_timeout == 0.5);
    assert_true(app->timeout == 12.5);
    assert_int_equal(app->retries, 0);
    assert_string_equal(app->host, "app.internal:8443");
    assert_false(app->tls_verify);
    assert_string_equal(app->tls_ca, in_tmp("ca.pem"));
    assert_int_equal(app->max_fails, 5);
    assert_true(app->fail_timeout == 2.5);
    assert_true(app->curl_only);

    assert_int_equal(api->line, 11);
    assert_int_equal(api->num_servers, 1);
    assert_string_equal(api->servers[0].url, "https://api.example.com:443");
    assert_true(api->servers[0].https);
    assert_int_equal(api->balance, UM_BALANCE_HASH);
    assert_int_equal(api->retries, 10);
    assert_int_equal(api->max_fails, 1);
    assert_true(api->tls_verify);
    assert_null(api->tls_ca);
    assert_null(api->host);
    assert_false(api->curl_only);

    assert_int_equal(c->num_routes, 3);
    assert_int_equal(c->routes[0].upstream, 0);
    assert_string_equal(c->routes[0].host, "api.example.com");
    assert_null(c->routes[0].root);
    assert_null(c->routes[0].index);
    assert_int_equal(c->routes[0].line, 15);
    assert_int_equal(c->routes[1].upstream, -1);
    assert_string_equal(c->routes[1].root, in_tmp("www"));
    assert_string_equal(c->routes[1].index, "index.html");
    assert_int_equal(c->routes[2].upstream, 1);
    assert_string_equal(c->routes[2].path, "/");
    assert_null(c->routes[2].root);
    assert_int_equal(c->routes[2].line, 17);
    um_config_unref(c);
}

static void test_upstream_defaults(void **state)
{
    /* servers may be a single string. */
    struct um_config *c = load_ok("upstreams = { app = { servers = 'http://localhost:9000' } }\n"
                                  "routes = { { path = '/', upstream = 'app' } }\n");
    assert_int_equal(c->num_upstreams, 1);
    const struct um_upstream_conf *u = &c->upstreams[0];
    assert_string_equal(u->name, "app");
    assert_int_equal(u->line, 1);
    assert_int_equal(u->num_servers, 1);
    assert_string_equal(u->servers[0].url, "http://localhost:9000");
    assert_int_equal(u->balance, UM_BALANCE_ROUND_ROBIN);
    assert_true(u->connect_timeout == 2);
    assert_true(u->timeout == 30);
    assert_int_equal(u->retries, 1);
    assert_null(u->host);
    assert_true(u->tls_verify);
    assert_null(u->tls_ca);
    assert_int_equal(u->max_fails, 3);
    assert_true(u->fail_timeout == 10);
    assert_false(u->curl_only); /* client = "auto" */
    assert_int_equal(c->routes[0].upstream, 0);
    um_config_unref(c);

    /* No upstreams: static routes only, each with upstream -1; an empty table is fine. */
    c = load_ok("upstreams = {}\nroutes = { { path = '/', root = 'www' } }\n");
    assert_int_equal(c->num_upstreams, 0);
    assert_null(c->upstreams);
    assert_int_equal(c->routes[0].upstream, -1);
    um_config_unref(c);
    c = load_ok("routes = { { path = '/', root = 'www' } }\n");
    assert_int_equal(c->num_upstreams, 0);
    assert_int_equal(c->routes[0].upstream, -1);
    um_config_unref(c);
}

static void test_upstream_url_normalisation(void **state)
{
    static const struct {
        const char *in, *out;
        bool https;
    } cases[] = {
        {"http://127.0.0.1", "http://127.0.0.1:80", false},
        {"http://127.0.0.1/", "http://127.0.0.1:80", false},
        {"https://127.0.0.1", "https://127.0.0.1:443", true},
        {"HTTP://Example.COM:8080/", "http://example.com:8080", false},
        {"HttpS://WWW.Example.com", "https://www.example.com:443", true},
        {"http://[::1]:9000", "http://[::1]:9000", false},
        {"https://[0:0:0:0:0:0:0:1]/", "https://[::1]:443", true},
        {"http://[2001:DB8::A]", "http://[2001:db8::a]:80", false},
        {"http://app_1:00080", "http://app_1:80", false},
        {"http://a.b-c.example:65535", "http://a.b-c.example:65535", false},
        {"https://localhost:1", "https://localhost:1", true},
    };
    char text[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(text, sizeof text,
                 "upstreams = { u = { servers = { '%s' } } }\n"
                 "routes = { { path = '/', upstream = 'u' } }\n",
                 cases[i].in);
        struct um_config *c = load_ok(text);
        if (strcmp(c->upstreams[0].servers[0].url, cases[i].out) != 0)
            fail_msg("'%s' became '%s', expected '%s'", cases[i].in,
                     c->upstreams[0].servers[0].url, cases[i].out);
        assert_int_equal(c->upstreams[0].servers[0].https, cases[i].https);
        um_config_unref(c);
    }
}

static void test_upstream_index_resolution(void **state)
{
    /* Written b before a: stored a, b, and the routes' indexes follow that order. */
    struct um_config *c = load_ok("upstreams = {\n"
                                  "  zeta = { servers = { 'http://10.0.0.2:80' } },\n"
                                  "  alpha = { servers = { 'http://10.0.0.1:80' } },\n"
                                  "}\n"
                                  "routes = {\n"
                                  "  { path = '/z/', upstream = 'zeta' },\n"
                                  "  { path = '/s/', root = 'www' },\n"
                                  "  { path = '/a/', upstream = 'alpha' },\n"
                                  "  { path = '/', upstream = 'zeta' },\n"
                                  "}\n");
    assert_int_equal(c->num_upstreams, 2);
    assert_string_equal(c->upstreams[0].name, "alpha");
    assert_int_equal(c->upstreams[0].line, 3);
    assert_string_equal(c->upstreams[1].name, "zeta");
    assert_int_equal(c->upstreams[1].line, 2);
    assert_int_equal(c->routes[0].upstream, 1);
    assert_int_equal(c->routes[1].upstream, -1);
    assert_int_equal(c->routes[2].upstream, 0);
    assert_int_equal(c->routes[3].upstream, 1);
    assert_string_equal(c->upstreams[c->routes[0].upstream].servers[0].url, "http://10.0.0.2:80");
    assert_string_equal(c->upstreams[c->routes[2].upstream].servers[0].url, "http://10.0.0.1:80");
    um_config_unref(c);

    /* Names with '-' need the ["..."] key syntax; the line finder still places them. */
    c = load_ok("upstreams = {\n"
                "  ['my-app'] = { servers = 'http://a' },\n"
                "  _b2 = { servers = 'http://b' },\n"
                "}\n"
                "routes = { { path = '/', upstream = 'my-app' } }\n");
    assert_string_equal(c->upstreams[0].name, "_b2");
    assert_string_equal(c->upstreams[1].name, "my-app");
    assert_int_equal(c->upstreams[1].line, 2);
    assert_int_equal(c->routes[0].upstream, 1);
    um_config_unref(c);
}

#define ROUTE_APP "routes = { { path = '/', upstream = 'app' } }\n"

/* protocol = "h1" (default) or "h2"; anything else, or "h2" where Umbra's own client
 * cannot go, names the file's line. */
static void test_upstream_protocol(void **state)
{
    (void)state;
    struct um_config *c = load_ok("upstreams = { app = { servers = 'http://127.0.0.1:8080' } }\n"
                                  ROUTE_APP);
    assert_false(c->upstreams[0].h2);
    um_config_unref(c);
    c = load_ok("upstreams = { app = { servers = 'http://127.0.0.1:8080', protocol = 'h2' } }\n"
                ROUTE_APP);
    assert_true(c->upstreams[0].h2);
    um_config_unref(c);
    c = load_ok("upstreams = { app = { servers = 'http://127.0.0.1:8080', protocol = 'h1' } }\n"
                ROUTE_APP);
    assert_false(c->upstreams[0].h2);
    um_config_unref(c);
    expect_error("upstreams = {\n"
                 "  app = {\n"
                 "    servers = 'http://127.0.0.1:8080',\n"
                 "    protocol = 'h3',\n"
                 "  },\n"
                 "}\n" ROUTE_APP,
                 4, "upstreams.app.protocol: expected \"h1\" or \"h2\"");
    c = load_ok("upstreams = { app = { servers = { 'https://127.0.0.1:8443', 'http://b.test' "
                "}, protocol = 'h2' } }\n" ROUTE_APP);
    assert_true(c->upstreams[0].h2);
    um_config_unref(c);
    expect_error("upstreams = {\n"
                 "  app = {\n"
                 "    servers = 'https://127.0.0.1:8443',\n"
                 "    client = 'curl',\n"
                 "    protocol = 'h2',\n"
                 "  },\n"
                 "}\n" ROUTE_APP,
                 5, "upstreams.app.protocol: \"h2\" is not for client = \"curl\"");
    expect_error("upstreams = {\n"
                 "  app = {\n"
                 "    servers = 'http://127.0.0.1:8080',\n"
                 "    protocol = 'h2',\n"
                 "    send_proxy = 'v1',\n"
                 "  },\n"
                 "}\n" ROUTE_APP,
                 5, "upstreams.app.send_proxy: not with protocol = \"h2\"");
}

static void test_upstream_health(void **state)
{
    (void)state;
    /* Without health: no probes. */
    struct um_config *c = load_ok("upstreams = { app = { servers = 'http://a' } }\n" ROUTE_APP);
    assert_null(c->upstreams[0].health_path);
    um_config_unref(c);
    /* The defaults. */
    c = load_ok("upstreams = { app = { servers = 'http://a', health = { path = '/hz?x=1' } } "
                "}\n" ROUTE_APP);
    const struct um_upstream_conf *u = &c->upstreams[0];
    assert_string_equal(u->health_path, "/hz?x=1");
    assert_true(u->health_interval == 2);
    assert_true(u->health_timeout == 1);
    assert_int_equal(u->health_fails, 3);
    assert_int_equal(u->health_passes, 2);
    assert_int_equal(u->health_status_lo, 200);
    assert_int_equal(u->health_status_hi, 399);
    um_config_unref(c);
    /* Every key; a single status. */
    c = load_ok(
        "upstreams = { app = { servers = 'http://a', health = { path = '/h',\n"
        "  interval = 0.5, timeout = 0.25, fails = 1, passes = 5, status = 204 } } }\n" ROUTE_APP);
    u = &c->upstreams[0];
    assert_true(u->health_interval == 0.5);
    assert_true(u->health_timeout == 0.25);
    assert_int_equal(u->health_fails, 1);
    assert_int_equal(u->health_passes, 5);
    assert_int_equal(u->health_status_lo, 204);
    assert_int_equal(u->health_status_hi, 204);
    um_config_unref(c);

    expect_error(
        "upstreams = { app = { servers = 'http://a',\n health = { interval = 2 } } }\n" ROUTE_APP,
        2, "upstreams.app.health.path: missing");
    expect_error(
        "upstreams = { app = { servers = 'http://a',\n health = { path = 'h' } } }\n" ROUTE_APP, 2,
        "upstreams.app.health.path: bad path 'h'");
    expect_error(
        "upstreams = { app = { servers = 'http://a',\n health = { path = '/a b' } } }\n" ROUTE_APP,
        2, "upstreams.app.health.path: bad path");
    expect_error("upstreams = { app = { servers = 'http://a',\n health = { path = '/h',\n"
                 " passes = 101 } } }\n" ROUTE_APP,
                 3, "upstreams.app.health.passes: expected an integer from 1 to 100");
    expect_error("upstreams = { app = { servers = 'http://a',\n health = { path = '/h',\n"
                 " interval = 0 } } }\n" ROUTE_APP,
                 3, "upstreams.app.health.interval");
    expect_error("upstreams = { app = { servers = 'http://a',\n health = { path = '/h',\n"
                 " interval = 0.01 } } }\n" ROUTE_APP,
                 2, "upstreams.app.health.interval: expected at least 0.05 seconds");
    static const char *const bad_status[] = {"'399-200'", "'2xx'",         "'200-'", "99",
                                             "'600'",     "'200-300-400'", "true"};
    char text[256];
    for (size_t i = 0; i < UM_NELEMS(bad_status); i++) {
        snprintf(text, sizeof text,
                 "upstreams = { app = { servers = 'http://a',\n health = { path = '/h',\n"
                 " status = %s } } }\n" ROUTE_APP,
                 bad_status[i]);
        expect_error(text, 3, "upstreams.app.health.status: expected a status or a range");
    }
    expect_error("upstreams = { app = { servers = 'http://a',\n health = { path = '/h', "
                 "every = 1 } } }\n" ROUTE_APP,
                 2, "upstreams.app.health: unknown key 'every'");
    expect_error("upstreams = { app = { servers = 'http://a',\n health = true } }\n" ROUTE_APP, 2,
                 "upstreams.app.health: expected a table");
}

static void test_err_upstream_unknown_in_route(void **state)
{
    expect_error("upstreams = {\n"
                 "  app = { servers = { 'http://127.0.0.1:9000' } },\n"
                 "  api = { servers = { 'http://127.0.0.1:9001' } },\n"
                 "}\n"
                 "routes = {\n"
                 "  { path = '/a/', upstream = 'app' },\n"
                 "  { path = '/',\n"
                 "    upstream = 'ap' },\n"
                 "}\n",
                 8, "routes.2.upstream: unknown upstream 'ap' (upstreams are: api, app)");
    expect_error("routes = {\n"
                 "  { path = '/', upstream = 'app' },\n"
                 "}\n",
                 2, "unknown upstream 'app' (the upstreams setting defines none)");
    expect_error("upstreams = { app = { servers = 'http://a' } }\n"
                 "routes = {\n"
                 "  { path = '/', upstream = 3 },\n"
                 "}\n",
                 3, "routes.1.upstream: expected the name of an upstream, got number");
}

static void test_err_upstream_url_path(void **state)
{
    expect_error("upstreams = {\n"
                 "  app = {\n"
                 "    servers = {\n"
                 "      'http://127.0.0.1:9000',\n"
                 "      'http://127.0.0.1:9001/api',\n"
                 "    },\n"
                 "  },\n"
                 "}\n" ROUTE_APP,
                 5, "upstreams.app.servers.2: bad URL 'http://127.0.0.1:9001/api': a path is "
                    "not allowed");
    expect_error("upstreams = { app = { servers = 'http://a//' } }\n" ROUTE_APP, 1,
                 "a path is not allowed");
    expect_error("upstreams = { app = { servers = 'http://a?x=1' } }\n" ROUTE_APP, 1,
                 "a query is not allowed");
    expect_error("upstreams = { app = { servers = 'http://a/?x=1' } }\n" ROUTE_APP, 1,
                 "a query is not allowed");
    expect_error("upstreams = { app = { servers = 'http://a#f' } }\n" ROUTE_APP, 1,
                 "a fragment is not allowed");
    expect_error("upstreams = {\n app = { servers = 'http://user:pw@a' } }\n" ROUTE_APP, 2,
                 "user info");
    expect_error("upstreams = { app = { servers = 'http://a b' } }\n" ROUTE_APP, 1,
                 "space or control character");
    expect_error("upstreams = { app = { servers = '127.0.0.1:9000' } }\n" ROUTE_APP, 1,
                 "bad URL '127.0.0.1:9000' (expected \"http://HOST[:PORT]\"");
    expect_error("upstreams = { app = { servers = 'http://' } }\n" ROUTE_APP, 1,
                 "missing host");
    expect_error("upstreams = { app = { servers = 'http://:80' } }\n" ROUTE_APP, 1,
                 "missing host");
    expect_error("upstreams = { app = { servers = 'http://::1:80' } }\n" ROUTE_APP, 1,
                 "brackets");
    expect_error("upstreams = { app = { servers = 'http://[::g]:80' } }\n" ROUTE_APP, 1,
                 "bad IPv6 address");
    expect_error("upstreams = { app = { servers = 'http://[::1]x' } }\n" ROUTE_APP, 1,
                 "bad URL");
    expect_error("upstreams = { app = { servers = 'http://300.0.0.1' } }\n" ROUTE_APP, 1,
                 "bad IPv4 address");
    expect_error("upstreams = { app = { servers = 'http://a..b' } }\n" ROUTE_APP, 1,
                 "bad host");
    expect_error("upstreams = { app = { servers = 'http://a%2eb' } }\n" ROUTE_APP, 1,
                 "bad host");
}

static void test_err_upstream_scheme(void **state)
{
    expect_error("upstreams = {\n"
                 "  app = { servers = { 'http://a',\n"
                 "                      'ftp://127.0.0.1:21' } },\n"
                 "}\n" ROUTE_APP,
                 3, "upstreams.app.servers.2: bad scheme in 'ftp://127.0.0.1:21'");
    expect_error("upstreams = { app = { servers = 'httpx://a' } }\n" ROUTE_APP, 1,
                 "bad scheme");
    expect_error("upstreams = { app = { servers = '://a' } }\n" ROUTE_APP, 1, "bad scheme");
}

static void test_err_upstream_port(void **state)
{
    expect_error("upstreams = {\n"
                 "  app = {\n"
                 "    servers = 'http://127.0.0.1:70000',\n"
                 "  },\n"
                 "}\n" ROUTE_APP,
                 3, "upstreams.app.servers: bad port in 'http://127.0.0.1:70000' (expected 1 "
                    "to 65535)");
    static const char *const bad[] = {"http://a:0", "http://a:", "http://a:8x", "http://a:-1",
                                      "http://[::1]:", "https://a:123456"};
    char text[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(text, sizeof text, "upstreams = { app = { servers = '%s' } }\n" ROUTE_APP,
                 bad[i]);
        expect_error(text, 1, "bad port");
    }
}

static void test_err_upstream_servers(void **state)
{
    expect_error("upstreams = {\n"
                 "  app = {\n"
                 "    servers = {},\n"
                 "  },\n"
                 "}\n" ROUTE_APP,
                 3, "upstreams.app.servers: expected at least one server");
    expect_error("upstreams = {\n"
                 "  app = {\n"
                 "    retries = 2,\n"
                 "  },\n"
                 "}\n" ROUTE_APP,
                 2, "upstreams.app.servers: missing");
    expect_error("upstreams = { app = { servers = 9000 } }\n" ROUTE_APP, 1,
                 "upstreams.app.servers: expected a URL or a list of URLs, got number");
    expect_error("upstreams = { app = { servers = { 'http://a', 9000 } } }\n" ROUTE_APP, 1,
                 "upstreams.app.servers.2: expected a URL");
    expect_error("upstreams = { app = { servers = { 'http://a', nil, 'http://b' } } }\n" ROUTE_APP,
                 1, "upstreams.app.servers: expected a list without holes");
    expect_error("upstreams = {\n"
                 "  app = { servers = {\n"
                 "    'http://a:80', 'http://b',\n"
                 "    'HTTP://A/' } },\n"
                 "}\n" ROUTE_APP,
                 4, "upstreams.app.servers.3: 'HTTP://A/' is listed twice (as http://a:80)");
}

static void test_err_upstream_balance(void **state)
{
    expect_error("upstreams = {\n"
                 "  app = {\n"
                 "    servers = 'http://a',\n"
                 "    balance = 'random',\n"
                 "  },\n"
                 "}\n" ROUTE_APP,
                 4, "upstreams.app.balance: expected one of: round_robin, least_conn, hash");
    expect_error("upstreams = { app = { servers = 'http://a', balance = 1 } }\n" ROUTE_APP, 1,
                 "upstreams.app.balance: expected one of");
}

static void test_err_upstream_numbers_and_host(void **state)
{
    expect_error("upstreams = {\n"
                 "  app = { servers = 'http://a',\n"
                 "    connect_timeout = 0 },\n"
                 "}\n" ROUTE_APP,
                 3, "upstreams.app.connect_timeout: expected a number of seconds greater than 0");
    expect_error("upstreams = { app = { servers = 'http://a', timeout = '30' } }\n" ROUTE_APP,
                 1, "upstreams.app.timeout: expected a number of seconds");
    expect_error("upstreams = { app = { servers = 'http://a', fail_timeout = -1 } }\n" ROUTE_APP,
                 1, "upstreams.app.fail_timeout");
    expect_error("upstreams = {\n app = { servers = 'http://a',\n retries = 11 } }\n" ROUTE_APP,
                 3, "upstreams.app.retries: expected an integer from 0 to 10");
    expect_error("upstreams = { app = { servers = 'http://a', retries = 1.5 } }\n" ROUTE_APP, 1,
                 "upstreams.app.retries");
    expect_error("upstreams = { app = { servers = 'http://a', max_fails = 0 } }\n" ROUTE_APP, 1,
                 "upstreams.app.max_fails: expected an integer from 1 to 100");
    expect_error("upstreams = {\n app = { servers = 'http://a',\n host = 'a b' } }\n" ROUTE_APP,
                 3, "upstreams.app.host: bad Host 'a b'");
    expect_error("upstreams = { app = { servers = 'http://a', host = 'a/b' } }\n" ROUTE_APP, 1,
                 "bad Host");
    expect_error("upstreams = { app = { servers = 'http://a', host = 'a\\r\\nX: y' } }\n"
                 ROUTE_APP, 1, "bad Host");
    expect_error("upstreams = { app = { servers = 'http://a', host = '' } }\n" ROUTE_APP, 1,
                 "upstreams.app.host: expected a Host");
    expect_error("upstreams = { app = { servers = 'http://a', host = false } }\n" ROUTE_APP, 1,
                 "upstreams.app.host: expected a Host");
}

static void test_err_upstream_root_and_upstream(void **state)
{
    expect_error("upstreams = { app = { servers = 'http://a' } }\n"
                 "routes = {\n"
                 "  { path = '/s/', root = 'www' },\n"
                 "  { path = '/',\n"
                 "    root = 'www',\n"
                 "    upstream = 'app' },\n"
                 "}\n",
                 4, "routes.2: has both root and upstream");
    expect_error("upstreams = { app = { servers = 'http://a' } }\n"
                 "routes = {\n"
                 "  { path = '/',\n"
                 "    upstream = 'app',\n"
                 "    index = 'index.html' },\n"
                 "}\n",
                 5, "routes.1.index: only routes with a root have an index");
}

static void test_err_upstream_route_needs_one(void **state)
{
    expect_error("upstreams = { app = { servers = 'http://a' } }\n"
                 "routes = {\n"
                 "  { path = '/a/', upstream = 'app' },\n"
                 "  {\n"
                 "    path = '/',\n"
                 "  },\n"
                 "}\n",
                 4, "routes.2: route needs root or upstream");
}

static void test_err_upstream_tls(void **state)
{
    expect_error("upstreams = {\n"
                 "  app = {\n"
                 "    servers = 'https://a',\n"
                 "    tls = { verify = true,\n"
                 "            ca = 'missing-ca.pem' },\n"
                 "  },\n"
                 "}\n" ROUTE_APP,
                 5, "upstreams.app.tls.ca: no such file 'missing-ca.pem'");
    /* The message shows where it was looked for: the config's folder. */
    expect_error("upstreams = { app = { servers = 'https://a',\n"
                 "                      tls = { ca = 'missing-ca.pem' } } }\n" ROUTE_APP,
                 2, in_tmp("missing-ca.pem"));
    expect_error("upstreams = { app = { servers = 'https://a', tls = { ca = 'www' } } }\n"
                 ROUTE_APP, 1, "is not a regular file");
    expect_error("upstreams = { app = { servers = 'https://a', tls = { verify = 'no' } } }\n"
                 ROUTE_APP, 1, "upstreams.app.tls.verify: expected true or false, got string");
    expect_error("upstreams = { app = { servers = 'https://a', tls = true } }\n" ROUTE_APP, 1,
                 "upstreams.app.tls: expected a table");
}

static void test_err_upstream_unknown_key(void **state)
{
    expect_error("upstreams = {\n"
                 "  app = {\n"
                 "    servers = 'http://a',\n"
                 "    retry = 2,\n"
                 "  },\n"
                 "}\n" ROUTE_APP,
                 4,
                 "upstreams.app: unknown key 'retry' (expected one of: servers, balance, "
                 "connect_timeout, timeout, retries, host, tls, max_fails, fail_timeout, "
                 "client, send_proxy, health, protocol)");
    expect_error("upstreams = {\n"
                 "  app = {\n"
                 "    servers = 'https://a',\n"
                 "    tls = {\n"
                 "      verify = true, cafile = 'ca.pem' },\n"
                 "  },\n"
                 "}\n" ROUTE_APP,
                 5, "upstreams.app.tls: unknown key 'cafile' (expected one of: verify, ca)");
    expect_error("upstreams = { app = { 'http://a' } }\n" ROUTE_APP, 1,
                 "upstreams.app: unexpected value at key [1]");
}

static void test_err_upstream_names_and_types(void **state)
{
    expect_error("routes = { { path = '/', root = 'www' } }\n"
                 "upstreams = 'http://a'\n",
                 2, "upstreams: expected a table");
    expect_error("routes = { { path = '/', root = 'www' } }\n"
                 "upstreams = {\n"
                 "  { servers = 'http://a' },\n"
                 "}\n",
                 3, "upstreams: expected upstream names as keys, got [1]");
    expect_error("routes = { { path = '/', root = 'www' } }\n"
                 "upstreams = {\n"
                 "  ['1app'] = { servers = 'http://a' },\n"
                 "}\n",
                 3, "upstreams: bad upstream name '1app'");
    expect_error("routes = { { path = '/', root = 'www' } }\n"
                 "upstreams = { ['a.b'] = { servers = 'http://a' } }\n",
                 2, "bad upstream name 'a.b'");
    expect_error("routes = { { path = '/', root = 'www' } }\n"
                 "upstreams = {\n"
                 "  app = 'http://a',\n"
                 "}\n",
                 3, "upstreams.app: expected a table such as { servers = ");
}

/* --- line finder --------------------------------------------------------------------- */

static void test_lualines(void **state)
{
    static const char src[] =
        "#!/usr/bin/env umbra\n"                               /* 1 */
        "--[==[ routes = { { path = ']]' } }\n"                /* 2 */
        "]==] -- listen = {\n"                                 /* 3 */
        "local routes_tmp = { a = 1 }\n"                       /* 4 */
        "routes = {\n"                                         /* 5 */
        "  { path = \"/a\\\"\\\n"                              /* 6 */
        "b\", root = [[x\n"                                    /* 7 */
        "y]], on = function(r) local a, b = 1, 2 end, n = 1 },\n" /* 8 */
        "  -- { path = '/ignored' },\n"                        /* 9 */
        "  {\n"                                                /* 10 */
        "    [\"path\"] = '/b', [2] = 'x';\n"                  /* 11 */
        "    root = '{' },\n"                                  /* 12 */
        "}\n"                                                  /* 13 */
        "function on_request(r)\n"                             /* 14 */
        "  limits = { max = 1 }\n"                             /* 15 */
        "end\n"                                                /* 16 */
        "limits = {\r\n"                                       /* 17 */
        "  max_body_bytes = '1MB' }\n"                         /* 18 */
        "x = 1 if x then mime = { md = 'a' } end\n"            /* 19 */
        "listen = { '1', [[\n"                                 /* 20 */
        "]], '3' }\n";                                         /* 21 */
    struct um__lualines ll = {0};
    um__lualines_scan(&ll, src, sizeof src - 1);
    assert_int_equal(um__lualines_find(&ll, "routes"), 5);
    assert_int_equal(um__lualines_find(&ll, "routes.1"), 6);
    assert_int_equal(um__lualines_find(&ll, "routes.1.path"), 6);
    assert_int_equal(um__lualines_find(&ll, "routes.1.root"), 7);
    assert_int_equal(um__lualines_find(&ll, "routes.1.on"), 8);
    assert_int_equal(um__lualines_find(&ll, "routes.1.n"), 8);
    assert_int_equal(um__lualines_find(&ll, "routes.2"), 10);
    assert_int_equal(um__lualines_find(&ll, "routes.2.path"), 11);
    assert_int_equal(um__lualines_find(&ll, "routes.2.2"), 11);
    assert_int_equal(um__lualines_find(&ll, "routes.2.root"), 12);
    assert_int_equal(um__lualines_find(&ll, "routes.3"), 0);
    assert_int_equal(um__lualines_find(&ll, "routes.1.a"), 0);
    assert_int_equal(um__lualines_find(&ll, "routes_tmp"), 0);
    assert_int_equal(um__lualines_find(&ll, "limits"), 17);
    assert_int_equal(um__lualines_find(&ll, "limits.max"), 0);
    assert_int_equal(um__lualines_find(&ll, "limits.max_body_bytes"), 18);
    assert_int_equal(um__lualines_find(&ll, "x"), 19);
    assert_int_equal(um__lualines_find(&ll, "mime.md"), 19);
    assert_int_equal(um__lualines_find(&ll, "listen.1"), 20);
    assert_int_equal(um__lualines_find(&ll, "listen.2"), 20);
    assert_int_equal(um__lualines_find(&ll, "listen.3"), 21);
    assert_int_equal(um__lualines_find(&ll, "a"), 0);
    assert_int_equal(um__lualines_find(&ll, "b"), 0);
    um__lualines_dispose(&ll);

    /* A later assignment replaces everything recorded under the name. */
    static const char again[] = "routes = { { root = 'a' },\n { root = 'b' } }\n"
                                "routes = {\n { path = '/' } }\n";
    um__lualines_scan(&ll, again, sizeof again - 1);
    assert_int_equal(um__lualines_find(&ll, "routes"), 3);
    assert_int_equal(um__lualines_find(&ll, "routes.1"), 4);
    assert_int_equal(um__lualines_find(&ll, "routes.1.root"), 0);
    assert_int_equal(um__lualines_find(&ll, "routes.2"), 0);
    um__lualines_dispose(&ll);
}

/* The line finder must survive anything: every prefix of a tricky source (unfinished
 * strings, comments, brackets), and random bytes. Each input sits at the end of a heap
 * block so that ASan catches an over-read. */
static void test_lualines_robust(void **state)
{
    static const char src[] =
        "routes = { { path = \"a\\\"\", [ [==[x]==] ] = 1, [f(1)] = { 2 }, --[[ c ]] 3 },\n"
        "  x = function() if a then return { 1, 2 } end end, [[\n]], '\\\n', ;; ,, }\n"
        "t = {{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{1}}}}}}}}}}}}}}}}}}}}}}}}}}}\n"
        "a = ] ) } end end until x = 1 --[=[ unfinished";
    size_t n = sizeof src - 1;
    for (size_t len = 0; len <= n; len++) {
        char *buf = malloc(len ? len : 1);
        assert_non_null(buf);
        memcpy(buf, src, len);
        struct um__lualines ll = {0};
        um__lualines_scan(&ll, buf, len);
        um__lualines_dispose(&ll);
        free(buf);
    }
    static const char alphabet[] = "{}[]()=,;'\"\\-\n\r .[=[]=]abcdefunction end 0x1e+5";
    unsigned seed = 12345;
    for (int round = 0; round < 2000; round++) {
        size_t len = (size_t)(round % 200);
        char *buf = malloc(len ? len : 1);
        assert_non_null(buf);
        for (size_t i = 0; i < len; i++) {
            seed = seed * 1103515245u + 12345u;
            unsigned r = seed >> 16;
            buf[i] = (r & 0x100) ? (char)r : alphabet[r % (sizeof alphabet - 1)];
        }
        struct um__lualines ll = {0};
        um__lualines_scan(&ll, buf, len);
        for (size_t i = 0; i < ll.num; i++)
            assert_true(ll.entries[i].line >= 1);
        um__lualines_dispose(&ll);
        free(buf);
    }
}

/* --- the server's tls setting ----------------------------------------------------------- */

/* Writes a self-signed ECDSA P-256 certificate for cn as tls/NAME.crt and its key as
 * tls/NAME.key (encrypted with a passphrase when encrypt). */
static void make_tls_pair(const char *name, const char *cn, bool encrypt)
{
    char p[PATH_MAX], file[64];
    EVP_PKEY *k = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    assert_non_null(k);
    assert_non_null(x);
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), 0);
    X509_gmtime_adj(X509_getm_notAfter(x), 86400);
    X509_set_pubkey(x, k);
    X509_NAME *n = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
    X509_set_issuer_name(x, n);
    assert_true(X509_sign(x, k, EVP_sha256()) > 0);
    snprintf(file, sizeof file, "tls/%s.crt", name);
    FILE *f = fopen(join_path(p, sizeof p, tmpdir, file), "wb");
    assert_non_null(f);
    assert_int_equal(PEM_write_X509(f, x), 1);
    fclose(f);
    snprintf(file, sizeof file, "tls/%s.key", name);
    f = fopen(join_path(p, sizeof p, tmpdir, file), "wb");
    assert_non_null(f);
    assert_int_equal(PEM_write_PrivateKey(f, k, encrypt ? EVP_aes_128_cbc() : NULL,
                                          encrypt ? (unsigned char *)"secret" : NULL,
                                          encrypt ? 6 : 0, NULL, NULL),
                     1);
    fclose(f);
    X509_free(x);
    EVP_PKEY_free(k);
}

static void make_tls_files(void)
{
    char p[PATH_MAX];
    make_dir("tls");
    make_tls_pair("a", "a.test", false);
    make_tls_pair("c", "c.test", false);
    make_tls_pair("enc", "enc.test", true);
    write_file(join_path(p, sizeof p, tmpdir, "tls/garbage.crt"), "garbage\n");
}

/* Asserts that text loads, and that the TLS module's check that follows every load (in
 * umbra, umbra -t and a reload) fails with "file:line: " and a message containing needle. */
static void expect_tls_error(const char *text, int line, const char *needle)
{
    char err[1024] = "", prefix[PATH_MAX + 32];
    struct um_config *c = load_ok(text);
    bool ok = um_tls_check_config(c, err, sizeof err);
    um_config_unref(c);
    if (ok)
        fail_msg("checked, but expected an error mentioning '%s'", needle);
    snprintf(prefix, sizeof prefix, "%s:%d: ", cfgpath, line);
    if (strncmp(err, prefix, strlen(prefix)) != 0)
        fail_msg("error '%s' does not start with '%s'", err, prefix);
    if (strstr(err, needle) == NULL)
        fail_msg("error '%s' does not mention '%s'", err, needle);
}

#define TLS_A "{ hosts = { 'a.test' }, cert = 'tls/a.crt', key = 'tls/a.key' }"
#define TLS_C "{ hosts = { 'c.test' }, cert = 'tls/c.crt', key = 'tls/c.key' }"
#define TLS_LISTEN "listen = { { '127.0.0.1:8443', tls = true } }\n"
#define ROUTE_WWW "routes = { { path = '/', root = 'www' } }\n"

/* tls.acme and entries with acme = true (issue #30): what is read, and the errors. */
static void test_tls_acme(void **state)
{
    (void)state;
    make_dir("acme");
    struct um_config *c = load_ok(
        TLS_LISTEN "tls = {\n"
        "  { hosts = { 'A.test', 'b.test' }, acme = true },\n"
        "  " TLS_C ",\n"
        "  acme = { directory = 'https://ca.test/dir', email = 'ops@example.com',\n"
        "    storage = 'acme', renew_before = '30d', challenges = { 'tls-alpn-01' } } }\n"
        ROUTE_WWW);
    const struct um_tls_conf *tc = um_tls_conf(c);
    char want[PATH_MAX];
    assert_true(tc->certs[0].acme);
    assert_false(tc->certs[1].acme);
    snprintf(want, sizeof want, "%s", in_tmp("acme/a.test.crt"));
    assert_string_equal(tc->certs[0].cert, want);
    snprintf(want, sizeof want, "%s", in_tmp("acme/a.test.key"));
    assert_string_equal(tc->certs[0].key, want);
    assert_string_equal(tc->acme.directory, "https://ca.test/dir");
    assert_string_equal(tc->acme.email, "ops@example.com");
    assert_string_equal(tc->acme.storage, in_tmp("acme"));
    assert_null(tc->acme.ca_file);
    assert_true(tc->acme.renew_before == 30 * 86400.0);
    assert_int_equal(tc->acme.challenges, UM_TLS_ACME_TLSALPN01);
    um_config_unref(c);
    /* Defaults: http-01, a third of the lifetime. */
    c = load_ok(TLS_LISTEN "tls = { { hosts = 'a.test', acme = true },\n"
                "  acme = { directory = 'https://ca.test/dir', storage = 'acme' } }\n" ROUTE_WWW);
    assert_int_equal(um_tls_conf(c)->acme.challenges, UM_TLS_ACME_HTTP01);
    assert_true(um_tls_conf(c)->acme.renew_before == 0);
    assert_null(um_tls_conf(c)->acme.email);
    um_config_unref(c);

    expect_error(TLS_LISTEN "tls = {\n { hosts = 'a.test', acme = true } }\n" ROUTE_WWW, 3,
                 "tls.1.acme: acme = true needs a CA");
    expect_error(TLS_LISTEN "tls = { { hosts = 'a.test', acme = 'yes' },\n"
                 "  acme = { directory = 'https://ca.test/dir', storage = 'acme' } }\n" ROUTE_WWW,
                 2, "tls.1.acme: expected true or false, got string");
    expect_error(TLS_LISTEN "tls = { { hosts = 'a.test', acme = true },\n"
                 "  acme = { directory = 'https://ca.test/dir',\n storage = 'nope' } }\n"
                 ROUTE_WWW, 4, "tls.acme.storage: no such");
    expect_error(TLS_LISTEN "tls = { { hosts = 'a.test', acme = true },\n"
                 "  acme = { storage = 'acme' } }\n" ROUTE_WWW, 3, "tls.acme.directory: missing");
    expect_error(TLS_LISTEN "tls = { { hosts = 'a.test', acme = true },\n"
                 "  acme = { directory = 'ftp://x', storage = 'acme' } }\n" ROUTE_WWW, 3,
                 "tls.acme.directory: 'ftp://x' is not an http(s):// URL");
    expect_error(TLS_LISTEN "tls = { { hosts = 'a.test', acme = true },\n"
                 "  acme = { directory = 'https://x/d', storage = 'acme', email = 'nobody' } }\n"
                 ROUTE_WWW, 3, "tls.acme.email: 'nobody' is not an e-mail address");
    expect_error(TLS_LISTEN "tls = { { hosts = 'a.test', acme = true },\n"
                 "  acme = { directory = 'https://x/d', storage = 'acme',\n"
                 "  renew_before = '3 days' } }\n" ROUTE_WWW, 4,
                 "tls.acme.renew_before: expected a duration");
    expect_error(TLS_LISTEN "tls = { { hosts = 'a.test', acme = true },\n"
                 "  acme = { directory = 'https://x/d', storage = 'acme',\n"
                 "  challenges = { 'http-01', 'http-01' } } }\n" ROUTE_WWW, 4,
                 "tls.acme.challenges.2: 'http-01' is listed twice");
    expect_error(TLS_LISTEN "tls = { { hosts = 'a.test', acme = true },\n"
                 "  acme = { directory = 'https://x/d', storage = 'acme', dir = 1 } }\n"
                 ROUTE_WWW, 3, "dir");
    expect_error(TLS_LISTEN "tls = { { hosts = 'a.test', acme = true, key = 'tls/a.key' },\n"
                 "  acme = { directory = 'https://x/d', storage = 'acme' } }\n" ROUTE_WWW, 2,
                 "tls.1.key: an entry with acme = true gets its certificate and key from the CA");
    expect_error(TLS_LISTEN "tls = { { hosts = { 'a.test', '*.b.test' }, acme = true },\n"
                 "  acme = { directory = 'https://x/d', storage = 'acme' } }\n" ROUTE_WWW, 2,
                 "'*.b.test' is a wildcard");
}

static void test_tls_full(void **state)
{
    char text[PATH_MAX + 1024];
    snprintf(text, sizeof text,
             "listen = { '127.0.0.1:8080', { '127.0.0.1:8443', tls = true } }\n"
             "tls = {\n"
             "  { hosts = { 'Example.COM', '*.example.com' }, cert = 'tls/a.crt',\n"
             "    key = 'tls/a.key' },\n"
             "  { hosts = 'other.test', cert = '%s', key = 'tls/../tls/c.key' },\n"
             "  protocols = { 'TLSv1.3' },\n"
             "  ciphers = 'ECDHE+AESGCM:!aNULL',\n"
             "  ciphersuites = 'TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384',\n"
             "  default = 'Other.test',\n"
             "}\n"
             "routes = {\n"
             "  { host = 'other.test', path = '/', root = 'www' },\n"
             "  { path = '/', root = 'www', redirect_https = true },\n"
             "}\n",
             in_tmp("tls/c.crt"));
    struct um_config *c = load_ok(text);

    assert_int_equal(c->num_listen, 2);
    assert_false(c->listen[0].tls);
    assert_true(c->listen[1].tls);
    assert_string_equal(c->listen[1].text, "127.0.0.1:8443");

    const struct um_tls_conf *tc = um_tls_conf(c);
    assert_int_equal(tc->num_certs, 2);
    assert_int_equal(tc->line, 2);
    assert_int_equal(tc->certs[0].num_hosts, 2);
    assert_string_equal(tc->certs[0].hosts[0], "example.com");
    assert_string_equal(tc->certs[0].hosts[1], "*.example.com");
    /* Joined to the config's folder, not resolved further. */
    assert_string_equal(tc->certs[0].cert, in_tmp("tls/a.crt"));
    assert_string_equal(tc->certs[0].key, in_tmp("tls/a.key"));
    assert_int_equal(tc->certs[0].line, 3);
    assert_int_equal(tc->certs[1].num_hosts, 1);
    assert_string_equal(tc->certs[1].hosts[0], "other.test");
    assert_string_equal(tc->certs[1].cert, in_tmp("tls/c.crt"));
    assert_string_equal(tc->certs[1].key, in_tmp("tls/../tls/c.key"));
    assert_int_equal(tc->certs[1].line, 5);
    assert_int_equal(tc->protocols, UM_TLS_PROTO_TLS13);
    assert_string_equal(tc->ciphers, "ECDHE+AESGCM:!aNULL");
    assert_string_equal(tc->ciphersuites, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384");
    assert_int_equal(tc->default_cert, 1);

    assert_false(c->routes[0].redirect_https);
    assert_true(c->routes[1].redirect_https);
    um_config_unref(c);

    /* Defaults: both protocols, OpenSSL's lists, the first entry. */
    c = load_ok(TLS_LISTEN "tls = { " TLS_A ", " TLS_C " }\n" ROUTE_WWW);
    assert_int_equal(um_tls_conf(c)->protocols, UM_TLS_PROTO_TLS12 | UM_TLS_PROTO_TLS13);
    assert_null(um_tls_conf(c)->ciphers);
    assert_null(um_tls_conf(c)->ciphersuites);
    assert_int_equal(um_tls_conf(c)->default_cert, 0);
    um_config_unref(c);

    /* Without a tls setting. */
    c = load_ok(ROUTE_WWW);
    assert_int_equal(um_tls_conf(c)->num_certs, 0);
    assert_false(c->listen[0].tls);
    assert_false(c->routes[0].redirect_https);
    um_config_unref(c);
}

static void test_http2(void **state)
{
    (void)state;
    struct um_config *c = load_ok("listen = { '127.0.0.1:1', { '127.0.0.1:2', http2 = false } }\n"
                                  ROUTE_WWW);
    assert_false(c->listen[0].no_http2);
    assert_true(c->listen[1].no_http2);
    assert_int_equal(c->http2.max_concurrent_streams, 128);
    assert_int_equal(c->http2.initial_window, 1 << 20);
    assert_int_equal(c->http2.max_header_list, 64 << 10);
    um_config_unref(c);
    c = load_ok("http2 = { max_concurrent_streams = 10, initial_window = '256KB',\n"
                "          max_header_list = 32768 }\n" ROUTE_WWW);
    assert_int_equal(c->http2.max_concurrent_streams, 10);
    assert_int_equal(c->http2.initial_window, 256 << 10);
    assert_int_equal(c->http2.max_header_list, 32768);
    um_config_unref(c);
    expect_error("\nhttp2 = { max_concurrent_streams = 0 }\n" ROUTE_WWW, 2,
                 "http2.max_concurrent_streams: expected an integer from 1 to 65536");
    expect_error("http2 = {\n  initial_window = '3GB' }\n" ROUTE_WWW, 2,
                 "http2.initial_window");
    expect_error("http2 = { max_header_list = '100' }\n" ROUTE_WWW, 1, "http2.max_header_list");
    expect_error("http2 = { window = 1 }\n" ROUTE_WWW, 1, "window");
    expect_error("http2 = 'on'\n" ROUTE_WWW, 1, "http2: expected a table, got string");
    expect_error("listen = { { '127.0.0.1:1',\n  http2 = 1 } }\n" ROUTE_WWW, 2,
                 "listen.1.http2: expected true or false, got number");
}

static void test_err_tls_listen(void **state)
{
    expect_error("listen = {\n"
                 "  '127.0.0.1:8080',\n"
                 "  { '127.0.0.1:8443', tls = true },\n"
                 "}\n" ROUTE_WWW,
                 3, "listen.2: tls = true needs certificates: add a setting tls = {");
    expect_error("-- one listener\n"
                 "listen = { '127.0.0.1:8443', tls = true }\n" ROUTE_WWW,
                 2, "listen: tls = true goes inside an entry of the list: listen = { { "
                    "\"127.0.0.1:8443\", tls = true } }");
    expect_error("listen = { { '127.0.0.1:8443',\n"
                 "             tls = 'yes' } }\n" ROUTE_WWW,
                 2, "listen.1.tls: expected true or false, got string");
    expect_error("listen = { '127.0.0.1:1', { '127.0.0.1:8443',\n"
                 "                            tsl = true } }\n" ROUTE_WWW,
                 2,
                 "listen.2: unexpected key 'tsl' (expected a \"HOST:PORT\" string or { "
                 "\"HOST:PORT\", tls = true, http2 = false, proxy_protocol = true, "
                 "proxy_from = { \"10.0.0.0/8\" } })");
    expect_error("listen = { { tls = true } }\n" ROUTE_WWW, 1,
                 "listen.1: missing the address");
    expect_error("listen = { { '127.0.0.1:99999', tls = true } }\n" ROUTE_WWW, 1,
                 "listen.1: bad port in '127.0.0.1:99999'");
    expect_error("listen = { '127.0.0.1:8443',\n"
                 "  { '127.0.0.1:8443', tls = true } }\n" ROUTE_WWW,
                 2, "listen.2: '127.0.0.1:8443' is listed twice");
}

static void test_err_tls_table(void **state)
{
    expect_error(TLS_LISTEN "tls = true\n" ROUTE_WWW, 2,
                 "tls: expected a list of certificate entries");
    expect_error(TLS_LISTEN "tls = {\n  protocols = { 'TLSv1.3' },\n}\n" ROUTE_WWW, 2,
                 "tls: expected at least one certificate entry");
    expect_error(TLS_LISTEN "tls = {\n  " TLS_A ",\n  protocol = 'TLSv1.3',\n}\n" ROUTE_WWW, 4,
                 "tls: unknown key 'protocol' (expected certificate entries and: protocols, "
                 "ciphers, ciphersuites, default, acme)");
    expect_error(TLS_LISTEN "tls = {\n  " TLS_A ",\n  [3] = " TLS_C ",\n}\n" ROUTE_WWW, 4,
                 "tls: expected a list of certificate entries without holes (found index 3)");
    expect_error(TLS_LISTEN "tls = {\n  " TLS_A ",\n  'c.test',\n}\n" ROUTE_WWW, 4,
                 "tls.2: expected a certificate entry such as");
    expect_error(TLS_LISTEN "tls = {\n  { hosts = { 'a.test' }, cert = 'tls/a.crt',\n"
                 "    key = 'tls/a.key', chain = 'x' },\n}\n" ROUTE_WWW,
                 4, "tls.1: unknown key 'chain' (expected one of: hosts, cert, key, acme)");
}

static void test_err_tls_hosts(void **state)
{
    expect_error(TLS_LISTEN "tls = {\n  { cert = 'tls/a.crt', key = 'tls/a.key' },\n}\n"
                 ROUTE_WWW, 3, "tls.1.hosts: missing (the names this certificate serves");
    expect_error(TLS_LISTEN "tls = {\n  { hosts = {}, cert = 'tls/a.crt', key = 'tls/a.key' },\n"
                 "}\n" ROUTE_WWW, 3, "tls.1.hosts: expected at least one host name");
    static const struct {
        const char *host, *msg;
    } bad[] = {
        {"a.*.test", "tls.1.hosts.2: bad name 'a.*.test' (a wildcard is only allowed as the "
                     "whole left-most label, e.g. \"*.example.com\")"},
        {"*x.test", "tls.1.hosts.2: bad name '*x.test'"},
        {"*", "tls.1.hosts.2: bad name '*'"},
        {"*.", "tls.1.hosts.2: bad host name '*.'"},
        {"a..test", "tls.1.hosts.2: bad host name 'a..test'"},
        {"a.test:443", "tls.1.hosts.2: bad host name 'a.test:443'"},
        {"10.0.0.1", "tls.1.hosts.2: '10.0.0.1' is an IP address, and clients send no name "
                     "(SNI) for those: tls.default picks the certificate they get"},
        {"A.test", "tls.1.hosts.2: 'A.test' is listed twice"},
    };
    char text[1024];
    for (size_t i = 0; i < UM_NELEMS(bad); i++) {
        snprintf(text, sizeof text,
                 TLS_LISTEN "tls = {\n"
                 "  { hosts = { 'a.test',\n"
                 "              '%s' },\n"
                 "    cert = 'tls/a.crt', key = 'tls/a.key' },\n"
                 "}\n" ROUTE_WWW,
                 bad[i].host);
        expect_error(text, 4, bad[i].msg);
    }
    expect_error(TLS_LISTEN "tls = {\n"
                 "  { hosts = { 'a.test', '*.a.test' }, cert = 'tls/a.crt', key = 'tls/a.key' },\n"
                 "  { hosts = { 'c.test',\n"
                 "              '*.A.test' }, cert = 'tls/c.crt', key = 'tls/c.key' },\n"
                 "}\n" ROUTE_WWW,
                 5, "tls.2.hosts.2: '*.A.test' is already listed in tls.1");
    expect_error(TLS_LISTEN "tls = { { hosts = 42, cert = 'tls/a.crt', key = 'tls/a.key' } }\n"
                 ROUTE_WWW, 2, "tls.1.hosts: expected a list of host names, got number");
}

static void test_err_tls_files(void **state)
{
    char want[PATH_MAX + 128];
    expect_error(TLS_LISTEN "tls = {\n  { hosts = { 'a.test' },\n    key = 'tls/a.key' },\n}\n"
                 ROUTE_WWW, 3, "tls.1.cert: missing (a PEM certificate chain file, relative "
                               "to the config's folder)");
    expect_error(TLS_LISTEN "tls = {\n  { hosts = { 'a.test' }, cert = 'tls/a.crt' },\n}\n"
                 ROUTE_WWW, 3, "tls.1.key: missing (a PEM key file");
    snprintf(want, sizeof want, "tls.1.cert: no such file 'tls/none.crt' (looked for %s)",
             in_tmp("tls/none.crt"));
    expect_error(TLS_LISTEN "tls = {\n  { hosts = { 'a.test' },\n"
                 "    cert = 'tls/none.crt', key = 'tls/a.key' },\n}\n" ROUTE_WWW,
                 4, want);
    expect_error(TLS_LISTEN "tls = { { hosts = { 'a.test' }, cert = 'tls', key = 'tls/a.key' } }"
                 "\n" ROUTE_WWW, 2, "is not a regular file");
    expect_error(TLS_LISTEN "tls = { { hosts = { 'a.test' }, cert = 'tls/a.crt', key = 5 } }\n"
                 ROUTE_WWW, 2, "tls.1.key: expected a PEM key file, got number");

    /* Checked with OpenSSL right after the load, at the line of the file at fault. */
    expect_tls_error(TLS_LISTEN "tls = {\n"
                 "  " TLS_A ",\n"
                 "  { hosts = { 'other.test' },\n"
                 "    cert = 'tls/garbage.crt',\n"
                 "    key = 'tls/c.key' },\n"
                 "}\n" ROUTE_WWW,
                 5, "tls.2.cert: tls/garbage.crt: no PEM certificate in the file");
    expect_tls_error(TLS_LISTEN "tls = {\n"
                 "  { hosts = { 'a.test' }, cert = 'tls/a.crt',\n"
                 "    key = 'tls/c.key' },\n"
                 "}\n" ROUTE_WWW,
                 4, "tls.1.key: tls/c.key does not match the certificate tls/a.crt");
    expect_tls_error(TLS_LISTEN "tls = {\n"
                 "  { hosts = { 'a.test' }, cert = 'tls/a.crt',\n"
                 "    key = 'tls/garbage.crt' },\n"
                 "}\n" ROUTE_WWW,
                 4, "tls.1.key: tls/garbage.crt: no PEM private key in the file");
    expect_tls_error(TLS_LISTEN "tls = {\n"
                 "  { hosts = { 'enc.test' }, cert = 'tls/enc.crt',\n"
                 "    key = 'tls/enc.key' },\n"
                 "}\n" ROUTE_WWW,
                 4, "tls.1.key: tls/enc.key: the key is encrypted (keys with a passphrase are "
                    "not supported)");
}

static void test_err_tls_options(void **state)
{
    expect_error(TLS_LISTEN "tls = {\n  " TLS_A ",\n  protocols = { 'TLSv1.2',\n"
                 "                'TLSv1.1' },\n}\n" ROUTE_WWW,
                 5, "tls.protocols.2: unknown protocol 'TLSv1.1' (expected one of: TLSv1.2, "
                    "TLSv1.3; older versions are not supported)");
    expect_error(TLS_LISTEN "tls = {\n  " TLS_A ",\n  protocols = {},\n}\n" ROUTE_WWW, 4,
                 "tls.protocols: expected at least one of: TLSv1.2, TLSv1.3");
    expect_error(TLS_LISTEN "tls = {\n  " TLS_A ",\n  protocols = { 'TLSv1.3', 'TLSv1.3' },\n}\n"
                 ROUTE_WWW, 4, "tls.protocols.2: 'TLSv1.3' is listed twice");
    expect_error(TLS_LISTEN "tls = {\n  " TLS_A ",\n  protocols = true,\n}\n" ROUTE_WWW, 4,
                 "tls.protocols: expected a list such as { \"TLSv1.2\", \"TLSv1.3\" }, got "
                 "boolean");
    expect_tls_error(TLS_LISTEN "tls = {\n  " TLS_A ",\n"
                 "  ciphers = 'ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA265',\n}\n"
                 ROUTE_WWW,
                 4, "tls.ciphers: 'ECDHE-RSA-AES128-GCM-SHA265' is not a known TLS 1.2 cipher "
                    "or cipher group");
    expect_tls_error(TLS_LISTEN "tls = {\n  " TLS_A ",\n  ciphersuites = 'TLS_AES_128_GCM',\n}\n"
                 ROUTE_WWW,
                 4, "tls.ciphersuites: 'TLS_AES_128_GCM' is not a known TLS 1.3 ciphersuite");
    expect_error(TLS_LISTEN "tls = {\n  " TLS_A ",\n  " TLS_C ",\n  default = 'b.test',\n}\n"
                 ROUTE_WWW, 5, "tls.default: 'b.test' is not among the hosts of the entries");
}

static void test_err_redirect_https(void **state)
{
    expect_error("routes = {\n"
                 "  { path = '/', root = 'www',\n"
                 "    redirect_https = true },\n"
                 "}\n",
                 3, "routes.1.redirect_https: no listener has tls = true (there is no https "
                    "address to redirect to)");
    expect_error(TLS_LISTEN "tls = { " TLS_A " }\n"
                 "routes = { { path = '/', root = 'www', redirect_https = 1 } }\n",
                 3, "routes.1.redirect_https: expected true or false, got number");
}

/* --- cache --------------------------------------------------------------------------- */

#define UPSTREAM_APP "upstreams = { app = { servers = 'http://127.0.0.1:9000' } }\n"
#define CACHE_ROUTES UPSTREAM_APP "routes = { { path = '/', upstream = 'app' } }\n"

static void expect_netmask(const struct um_netmask *m, int family, const char *addr, int prefix)
{
    unsigned char want[16] = {0};
    assert_int_equal(m->family, family);
    assert_int_equal(inet_pton(family, addr, want), 1);
    assert_memory_equal(m->addr, want, 16);
    assert_int_equal(m->prefix, prefix);
}

static void test_cache_full(void **state)
{
    struct um_config *c = load_ok(
        UPSTREAM_APP                                                        /* 1 */
        "cache = {\n"                                                       /* 2 */
        "  memory = '1GB', max_object = 1048576, clean_interval = 2.5,\n"   /* 3 */
        "  default_ttl = 60, stale_if_error = 0.5,\n"                       /* 4 */
        "  purge = { allow = { '127.0.0.1', '::1', '10.0.0.0/8',\n"         /* 5 */
        "                      '192.168.1.128/25', 'FD00::/8', '0.0.0.0/0',\n" /* 6 */
        "                      '2001:db8::1/128', '::/0', '172.16.0.1/32' } },\n" /* 7 */
        "}\n"                                                               /* 8 */
        "routes = {\n"                                                      /* 9 */
        "  { path = '/api/', upstream = 'app', cache = false },\n"          /* 10 */
        "  { path = '/s/', root = 'www', cache = false },\n"                /* 11 */
        "  { path = '/', upstream = 'app', cache = true },\n"               /* 12 */
        "}\n");
    const struct um_cache_conf *cc = um_cache_conf(c);
    assert_int_equal(cc->line, 2);
    assert_int_equal(cc->memory, 1ull << 30);
    assert_int_equal(cc->max_object, 1ull << 20);
    assert_true(cc->clean_interval == 2.5);
    assert_true(cc->default_ttl == 60);
    assert_true(cc->stale_if_error == 0.5);
    assert_int_equal(cc->num_purge_allow, 9);
    expect_netmask(&cc->purge_allow[0], AF_INET, "127.0.0.1", 32);
    expect_netmask(&cc->purge_allow[1], AF_INET6, "::1", 128);
    expect_netmask(&cc->purge_allow[2], AF_INET, "10.0.0.0", 8);
    expect_netmask(&cc->purge_allow[3], AF_INET, "192.168.1.128", 25);
    expect_netmask(&cc->purge_allow[4], AF_INET6, "fd00::", 8);
    expect_netmask(&cc->purge_allow[5], AF_INET, "0.0.0.0", 0);
    expect_netmask(&cc->purge_allow[6], AF_INET6, "2001:db8::1", 128);
    expect_netmask(&cc->purge_allow[7], AF_INET6, "::", 0);
    expect_netmask(&cc->purge_allow[8], AF_INET, "172.16.0.1", 32);
    assert_false(c->routes[0].cache);
    assert_false(c->routes[1].cache);
    assert_true(c->routes[2].cache);
    um_config_unref(c);

    /* Sizes as strings or numbers; allow as a single string; max_object = memory. */
    c = load_ok(CACHE_ROUTES "cache = { memory = 2097152, max_object = '2MB',\n"
                "  purge = { allow = 'fe80::/10' } }\n");
    assert_int_equal(um_cache_conf(c)->line, 3);
    assert_int_equal(um_cache_conf(c)->memory, 2u << 20);
    assert_int_equal(um_cache_conf(c)->max_object, 2u << 20);
    assert_int_equal(um_cache_conf(c)->num_purge_allow, 1);
    expect_netmask(&um_cache_conf(c)->purge_allow[0], AF_INET6, "fe80::", 10);
    um_config_unref(c);

    /* An empty list: nobody may purge. */
    c = load_ok(CACHE_ROUTES "cache = { purge = { allow = {} } }\n");
    assert_int_equal(um_cache_conf(c)->num_purge_allow, 0);
    assert_null(um_cache_conf(c)->purge_allow);
    um_config_unref(c);
}

static void expect_cache_defaults(const struct um_cache_conf *cc, int line)
{
    assert_int_equal(cc->line, line);
    assert_int_equal(cc->memory, 256ull << 20);
    assert_int_equal(cc->max_object, 64ull << 20);
    assert_true(cc->clean_interval == 10);
    assert_true(cc->default_ttl == 0);
    assert_true(cc->stale_if_error == 0);
    assert_int_equal(cc->num_purge_allow, 2);
    expect_netmask(&cc->purge_allow[0], AF_INET, "127.0.0.1", 32);
    expect_netmask(&cc->purge_allow[1], AF_INET6, "::1", 128);
}

static void test_cache_defaults(void **state)
{
    struct um_config *c = load_ok(CACHE_ROUTES);
    expect_cache_defaults(um_cache_conf(c), 0);
    um_config_unref(c);
    c = load_ok(ROUTE_WWW);
    expect_cache_defaults(um_cache_conf(c), 0);
    um_config_unref(c);
    /* An empty table, or an empty purge table, keeps every default. */
    c = load_ok(CACHE_ROUTES "\ncache = {}\n");
    expect_cache_defaults(um_cache_conf(c), 4);
    um_config_unref(c);
    c = load_ok(CACHE_ROUTES "cache = { purge = {} }\n");
    expect_cache_defaults(um_cache_conf(c), 3);
    um_config_unref(c);
    /* Only some keys: the others keep their defaults. */
    c = load_ok(CACHE_ROUTES "cache = { default_ttl = 30 }\n");
    assert_true(um_cache_conf(c)->default_ttl == 30);
    assert_int_equal(um_cache_conf(c)->memory, 256ull << 20);
    assert_int_equal(um_cache_conf(c)->num_purge_allow, 2);
    um_config_unref(c);
    /* The default max_object shrinks to a smaller memory; an explicit one must fit. */
    c = load_ok(CACHE_ROUTES "cache = { memory = '16MB' }\n");
    assert_int_equal(um_cache_conf(c)->memory, 16u << 20);
    assert_int_equal(um_cache_conf(c)->max_object, 16u << 20);
    um_config_unref(c);
    c = load_ok(CACHE_ROUTES "cache = { memory = '1MB', max_object = '1KB' }\n");
    assert_int_equal(um_cache_conf(c)->memory, 1u << 20);
    assert_int_equal(um_cache_conf(c)->max_object, 1024);
    um_config_unref(c);
    /* Zero is a valid default_ttl and stale_if_error. */
    c = load_ok(CACHE_ROUTES "cache = { default_ttl = 0, stale_if_error = 0 }\n");
    assert_true(um_cache_conf(c)->default_ttl == 0);
    assert_true(um_cache_conf(c)->stale_if_error == 0);
    um_config_unref(c);
}

static void test_route_cache_default(void **state)
{
    struct um_config *c = load_ok(UPSTREAM_APP
                                  "routes = {\n"
                                  "  { path = '/a/', upstream = 'app' },\n"
                                  "  { path = '/s/', root = 'www' },\n"
                                  "  { path = '/b/', upstream = 'app', cache = false },\n"
                                  "  { path = '/t/', root = 'www', cache = false },\n"
                                  "  { path = '/', upstream = 'app', cache = true },\n"
                                  "}\n");
    assert_true(c->routes[0].cache);  /* upstream: on by default */
    assert_false(c->routes[1].cache); /* static: off */
    assert_false(c->routes[2].cache);
    assert_false(c->routes[3].cache);
    assert_true(c->routes[4].cache);
    um_config_unref(c);
}

/* cache.l2: its defaults, an address with a port, IPv6, localhost; off without it. */
static void test_cache_l2(void **state)
{
    struct um_config *c = load_ok(UPSTREAM_APP "routes = { { path = '/', upstream = 'app' } }\n");
    assert_false(um_cache_conf(c)->l2.enabled);
    um_config_unref(c);
    c = load_ok(UPSTREAM_APP "routes = { { path = '/', upstream = 'app' } }\n"
                             "cache = { l2 = { redis = 'redis://10.1.2.3' } }\n");
    assert_true(um_cache_conf(c)->l2.enabled);
    assert_string_equal(um_cache_conf(c)->l2.host, "10.1.2.3");
    assert_int_equal(um_cache_conf(c)->l2.port, 6379);
    assert_int_equal(um_cache_conf(c)->l2.max_object, 1 << 20);
    assert_true(um_cache_conf(c)->l2.timeout > 0.0499 && um_cache_conf(c)->l2.timeout < 0.0501);
    um_config_unref(c);
    c = load_ok(UPSTREAM_APP "routes = { { path = '/', upstream = 'app' } }\n"
                             "cache = { l2 = { redis = 'redis://[::1]:7000/', max_object = '64KB',"
                             " timeout = 0.2 } }\n");
    assert_string_equal(um_cache_conf(c)->l2.host, "::1");
    assert_int_equal(um_cache_conf(c)->l2.port, 7000);
    assert_int_equal(um_cache_conf(c)->l2.max_object, 64 << 10);
    assert_true(um_cache_conf(c)->l2.timeout > 0.199 && um_cache_conf(c)->l2.timeout < 0.201);
    um_config_unref(c);
    c = load_ok(UPSTREAM_APP "routes = { { path = '/', upstream = 'app' } }\n"
                             "cache = { l2 = { redis = 'redis://localhost:6380' } }\n");
    assert_string_equal(um_cache_conf(c)->l2.host, "127.0.0.1");
    assert_int_equal(um_cache_conf(c)->l2.port, 6380);
    um_config_unref(c);
}

static void test_err_route_cache(void **state)
{
    expect_error(UPSTREAM_APP
                 "routes = {\n"
                 "  { path = '/a/', upstream = 'app' },\n"
                 "  { path = '/',\n"
                 "    root = 'www',\n"
                 "    cache = true },\n"
                 "}\n",
                 6, "routes.2.cache: cache applies to upstream routes");
    expect_error(UPSTREAM_APP
                 "routes = {\n"
                 "  { path = '/', upstream = 'app',\n"
                 "    cache = 'yes' },\n"
                 "}\n",
                 4, "routes.1.cache: expected true or false, got string");
    expect_error("routes = {\n  { path = '/', root = 'www', cache = 1 },\n}\n", 2,
                 "routes.1.cache: expected true or false, got number");
}

static void test_err_cache_table(void **state)
{
    expect_error(CACHE_ROUTES "\ncache = '256MB'\n", 4,
                 "cache: expected a table such as { memory = \"256MB\" }, got string");
    expect_error(CACHE_ROUTES "cache = false\n", 3, "cache: expected a table");
    expect_error(CACHE_ROUTES
                 "cache = {\n"
                 "  memory = '256MB',\n"
                 "  max_objects = '1MB',\n"
                 "}\n",
                 5, "cache: unknown key 'max_objects' (expected one of: memory, max_object, "
                    "clean_interval, default_ttl, stale_if_error, purge, targeted, expose_tags, l2, disk)");
    expect_error(CACHE_ROUTES "cache = {\n  '1MB',\n}\n", 4,
                 "cache: unexpected value at key [1]");
    expect_error(CACHE_ROUTES
                 "cache = {\n"
                 "  purge = {\n"
                 "    allow = { '127.0.0.1' },\n"
                 "    deny = { '10.0.0.1' },\n"
                 "  },\n"
                 "}\n",
                 6, "cache.purge: unknown key 'deny' (expected one of: allow)");
    expect_error(CACHE_ROUTES "cache = {\n  purge = true,\n}\n", 4,
                 "cache.purge: expected a table such as { allow = ");
    expect_error(CACHE_ROUTES "cache = {\n  purge = { allow = 1 },\n}\n", 4,
                 "cache.purge.allow: expected a list of addresses or networks");
    expect_error(CACHE_ROUTES "cache = { purge = {\n  allow = { '::1', nil, '127.0.0.1' } } }\n",
                 4, "cache.purge.allow: expected a list without holes");
    expect_error(CACHE_ROUTES "cache = { purge = {\n  allow = { x = '::1' } } }\n", 4,
                 "cache.purge.allow: unexpected key 'x'");
}

static void test_err_cache_sizes(void **state)
{
    expect_error(CACHE_ROUTES "cache = {\n  memory = '512KB',\n}\n", 4,
                 "cache.memory: 512KB is too small (at least 1MB)");
    expect_error(CACHE_ROUTES "cache = {\n  memory = 1048575,\n}\n", 4,
                 "cache.memory: 1048575 bytes is too small");
    expect_error(CACHE_ROUTES "cache = {\n  memory = 0,\n}\n", 4, "cache.memory: 0 bytes is "
                 "too small");
    expect_error(CACHE_ROUTES "cache = {\n  memory = '256 MB',\n}\n", 4,
                 "cache.memory: bad size \"256 MB\"");
    expect_error(CACHE_ROUTES "cache = {\n  memory = true,\n}\n", 4,
                 "cache.memory: expected a size");
    expect_error(CACHE_ROUTES "cache = {\n  memory = 1.5,\n}\n", 4,
                 "cache.memory: expected a size");
    expect_error(CACHE_ROUTES "cache = {\n  max_object = 0,\n}\n", 4,
                 "cache.max_object: expected more than 0 bytes");
    expect_error(CACHE_ROUTES "cache = {\n  max_object = -1,\n}\n", 4,
                 "cache.max_object: expected a size");
    expect_error(CACHE_ROUTES
                 "cache = {\n"
                 "  memory = '16MB',\n"
                 "  max_object = '32MB',\n"
                 "}\n",
                 5, "cache.max_object: 32MB is more than cache.memory (16MB)");
    /* Against the default memory too. */
    expect_error(CACHE_ROUTES "cache = {\n  max_object = '1GB',\n}\n", 4,
                 "cache.max_object: 1GB is more than cache.memory (256MB)");
    expect_error(CACHE_ROUTES "cache = {\n  max_object = 268435457,\n}\n", 4,
                 "cache.max_object: 268435457 bytes is more than cache.memory (256MB)");
}

static void test_err_cache_seconds(void **state)
{
    expect_error(CACHE_ROUTES "cache = {\n  clean_interval = 0,\n}\n", 4,
                 "cache.clean_interval: expected a number of seconds greater than 0");
    expect_error(CACHE_ROUTES "cache = {\n  clean_interval = '10',\n}\n", 4,
                 "cache.clean_interval: expected a number of seconds");
    expect_error(CACHE_ROUTES "cache = {\n  clean_interval = 0/0,\n}\n", 4,
                 "cache.clean_interval");
    expect_error(CACHE_ROUTES "cache = {\n  default_ttl = -1,\n}\n", 4,
                 "cache.default_ttl: expected a number of seconds from 0 to 31536000");
    expect_error(CACHE_ROUTES "cache = {\n  default_ttl = '60s',\n}\n", 4,
                 "cache.default_ttl: expected a number of seconds");
    expect_error(CACHE_ROUTES "cache = {\n  default_ttl = 1/0,\n}\n", 4, "cache.default_ttl");
    expect_error(CACHE_ROUTES "cache = {\n  stale_if_error = -0.5,\n}\n", 4,
                 "cache.stale_if_error: expected a number of seconds from 0 to");
    expect_error(CACHE_ROUTES "cache = {\n  stale_if_error = false,\n}\n", 4,
                 "cache.stale_if_error: expected a number of seconds");
    expect_error(CACHE_ROUTES "cache = {\n  stale_if_error = 0/0,\n}\n", 4,
                 "cache.stale_if_error");
}

static void test_err_cache_purge_allow(void **state)
{
    expect_error(CACHE_ROUTES
                 "cache = {\n"
                 "  purge = {\n"
                 "    allow = {\n"
                 "      '127.0.0.1',\n"
                 "      '10.0.0.1/8',\n"
                 "    },\n"
                 "  },\n"
                 "}\n",
                 7, "cache.purge.allow.2: '10.0.0.1/8' has address bits set beyond the /8 "
                    "prefix (the network is 10.0.0.0/8");
    expect_error(CACHE_ROUTES "cache = { purge = { allow = {\n  'fd00::1/8' } } }\n", 4,
                 "cache.purge.allow.1: 'fd00::1/8' has address bits set beyond the /8 prefix "
                 "(the network is fd00::/8");
    expect_error(CACHE_ROUTES "cache = { purge = { allow = {\n  '192.168.1.1/31' } } }\n", 4,
                 "the network is 192.168.1.0/31");
    expect_error(CACHE_ROUTES "cache = { purge = { allow = {\n  '1.0.0.0/0' } } }\n", 4,
                 "the network is 0.0.0.0/0");
    expect_error(CACHE_ROUTES "cache = { purge = { allow = {\n  '10.0.0.0/33' } } }\n", 4,
                 "cache.purge.allow.1: bad prefix length in '10.0.0.0/33' (expected /0 to /32)");
    expect_error(CACHE_ROUTES "cache = { purge = { allow = {\n  '::/129' } } }\n", 4,
                 "bad prefix length in '::/129' (expected /0 to /128)");
    static const char *const bad_prefix[] = {"10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/8x",
                                             "10.0.0.0/+8", "10.0.0.0/8/8", "::/00000",
                                             "10.0.0.0/ 8"};
    char text[512];
    for (size_t i = 0; i < sizeof bad_prefix / sizeof bad_prefix[0]; i++) {
        snprintf(text, sizeof text, CACHE_ROUTES "cache = { purge = { allow = {\n '%s' } } }\n",
                 bad_prefix[i]);
        expect_error(text, 4, "bad prefix length");
    }
    static const char *const bad_addr[] = {"localhost", "300.0.0.1", "10.0.0", "10.0.0.0.0",
                                           "::g",       "[::1]",     "fe80::1%eth0", "/8",
                                           " 10.0.0.1", "1.2.3.4:80"};
    for (size_t i = 0; i < sizeof bad_addr / sizeof bad_addr[0]; i++) {
        snprintf(text, sizeof text, CACHE_ROUTES "cache = { purge = { allow = {\n '%s' } } }\n",
                 bad_addr[i]);
        expect_error(text, 4, "bad ");
        expect_error(text, 4, "address");
    }
    expect_error(CACHE_ROUTES "cache = { purge = { allow = {\n  'nope' } } }\n", 4,
                 "cache.purge.allow.1: bad IPv4 address 'nope' (expected an IPv4 or IPv6 "
                 "address, or a network such as \"10.0.0.0/8\"");
    expect_error(CACHE_ROUTES "cache = { purge = { allow = {\n  '::1',\n  5 } } }\n", 5,
                 "cache.purge.allow.2: expected an address or a network");
    expect_error(CACHE_ROUTES "cache = { purge = { allow = {\n  '' } } }\n", 4,
                 "cache.purge.allow.1: expected an address or a network such as \"10.0.0.0/8\", "
                 "got an empty string");
    expect_error(CACHE_ROUTES "cache = { purge = {\n  allow = 'x' } }\n", 4,
                 "cache.purge.allow: bad IPv4 address 'x'");
    expect_error(CACHE_ROUTES "cache = { purge = { allow = {\n  '::1',\n  '0:0::1/128' } } }\n",
                 5, "cache.purge.allow.2: '0:0::1/128' is listed twice");
}

static void sa4(struct sockaddr_storage *ss, const char *addr)
{
    struct sockaddr_in *sin = (struct sockaddr_in *)ss;
    memset(ss, 0, sizeof *ss);
    sin->sin_family = AF_INET;
    sin->sin_port = htons(1234);
    assert_int_equal(inet_pton(AF_INET, addr, &sin->sin_addr), 1);
}

static void sa6(struct sockaddr_storage *ss, const char *addr)
{
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;
    memset(ss, 0, sizeof *ss);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(1234);
    assert_int_equal(inet_pton(AF_INET6, addr, &sin6->sin6_addr), 1);
}

/* Whether addr (IPv4 or IPv6 by its look) is allowed by the config's purge.allow. */
static bool allowed(const struct um_config *c, const char *addr)
{
    struct sockaddr_storage ss;
    if (strchr(addr, ':') != NULL)
        sa6(&ss, addr);
    else
        sa4(&ss, addr);
    return um_netmask_match(um_cache_conf(c)->purge_allow, um_cache_conf(c)->num_purge_allow,
                            (const struct sockaddr *)&ss);
}

static void test_netmask_match(void **state)
{
    /* The defaults: loopback only, in either family. */
    struct um_config *c = load_ok(CACHE_ROUTES);
    assert_true(allowed(c, "127.0.0.1"));
    assert_true(allowed(c, "::1"));
    assert_true(allowed(c, "::ffff:127.0.0.1"));
    assert_false(allowed(c, "127.0.0.2"));
    assert_false(allowed(c, "10.0.0.1"));
    assert_false(allowed(c, "::2"));
    assert_false(allowed(c, "::127.0.0.1")); /* IPv4-compatible, not mapped */
    assert_false(allowed(c, "::ffff:127.0.0.2"));
    um_config_unref(c);

    c = load_ok(CACHE_ROUTES "cache = { purge = { allow = {\n"
                "  '10.0.0.0/8', '192.168.1.128/25', '172.16.5.4', 'fd00::/8',\n"
                "  '2001:db8:1::/48', '2001:db8:ff::1', '100.64.0.0/10' } } }\n");
    static const char *const yes[] = {
        "10.0.0.0", "10.255.255.255", "10.1.2.3", "::ffff:10.9.8.7", "192.168.1.128",
        "192.168.1.255", "::ffff:192.168.1.200", "172.16.5.4", "fd00::1", "fdff:ffff::1",
        "2001:db8:1::", "2001:db8:1:ffff:ffff:ffff:ffff:ffff", "2001:db8:ff::1",
        "100.64.0.1", "100.127.255.255"};
    static const char *const no[] = {
        "11.0.0.0", "9.255.255.255", "192.168.1.127", "192.168.2.200", "172.16.5.5",
        "::ffff:11.0.0.1", "::ffff:172.16.5.5", "fc00::1", "fe00::1", "2001:db8:2::",
        "2001:db8:ff::2", "100.128.0.0", "100.63.255.255", "::1", "127.0.0.1",
        "::a00:1" /* ::10.0.0.1, compatible form */};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        if (!allowed(c, yes[i]))
            fail_msg("'%s' should match", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        if (allowed(c, no[i]))
            fail_msg("'%s' should not match", no[i]);
    um_config_unref(c);

    /* /0 networks match everything of their family; an IPv4 client is ::ffff:a.b.c.d to
     * IPv6 entries. */
    c = load_ok(CACHE_ROUTES "cache = { purge = { allow = { '0.0.0.0/0' } } }\n");
    assert_true(allowed(c, "1.2.3.4"));
    assert_true(allowed(c, "255.255.255.255"));
    assert_true(allowed(c, "::ffff:1.2.3.4"));
    assert_false(allowed(c, "2001:db8::1"));
    um_config_unref(c);
    c = load_ok(CACHE_ROUTES "cache = { purge = { allow = { '::ffff:10.0.0.0/104' } } }\n");
    assert_true(allowed(c, "10.1.2.3"));
    assert_true(allowed(c, "::ffff:10.1.2.3"));
    assert_false(allowed(c, "11.1.2.3"));
    um_config_unref(c);

    /* Nobody, with an empty list; nothing but IP families. */
    c = load_ok(CACHE_ROUTES "cache = { purge = { allow = {} } }\n");
    assert_false(allowed(c, "127.0.0.1"));
    assert_false(allowed(c, "::1"));
    um_config_unref(c);

    /* Directly, without a config: the prefix bits and nothing more. */
    struct um_netmask m[2] = {{.family = AF_INET, .addr = {192, 168, 0, 0}, .prefix = 23},
                              {.family = AF_INET6, .addr = {0x20, 0x01, 0x0d, 0xb8, 0x80},
                               .prefix = 33}};
    struct sockaddr_storage ss;
    const struct sockaddr *sa = (const struct sockaddr *)&ss;
    sa4(&ss, "192.168.1.255");
    assert_true(um_netmask_match(m, 2, sa));
    assert_false(um_netmask_match(m, 0, sa));
    sa4(&ss, "192.168.2.0");
    assert_false(um_netmask_match(m, 2, sa));
    sa6(&ss, "2001:db8:ffff:ffff::");
    assert_true(um_netmask_match(m, 2, sa));
    sa6(&ss, "2001:db8:7fff::");
    assert_false(um_netmask_match(m, 2, sa));
    sa6(&ss, "::ffff:192.168.0.1");
    assert_true(um_netmask_match(m, 2, sa));
    assert_false(um_netmask_match(m + 1, 1, sa));
    memset(&ss, 0, sizeof ss);
    ss.ss_family = AF_UNIX;
    assert_false(um_netmask_match(m, 2, sa));
    assert_false(um_netmask_match(m, 2, NULL));
}

int main(void)
{
    um_modules_init(); /* the modules' settings, as the server's main does */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_config),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_readme_defaults),
        cmocka_unit_test(test_compress_types_at_most_32),
        cmocka_unit_test(test_relative_root),
        cmocka_unit_test(test_sizes_in_config),
        cmocka_unit_test(test_parse_size),
        cmocka_unit_test(test_refcount),
        cmocka_unit_test(test_no_leaks),
        cmocka_unit_test(test_err_syntax),
        cmocka_unit_test(test_err_runtime),
        cmocka_unit_test(test_err_long_file_name),
        cmocka_unit_test(test_err_missing_file),
        cmocka_unit_test(test_err_unknown_setting),
        cmocka_unit_test(test_err_unknown_setting_names_every_setting),
        cmocka_unit_test(test_err_unknown_upstream_names_every_upstream),
        cmocka_unit_test(test_pid_file),
        cmocka_unit_test(test_err_unknown_route_key),
        cmocka_unit_test(test_err_workers),
        cmocka_unit_test(test_err_listen),
        cmocka_unit_test(test_err_port),
        cmocka_unit_test(test_err_missing_root),
        cmocka_unit_test(test_err_route_without_path),
        cmocka_unit_test(test_err_routes_missing),
        cmocka_unit_test(test_err_size),
        cmocka_unit_test(test_err_timeout),
        cmocka_unit_test(test_err_mime_and_log_level),
        cmocka_unit_test(test_err_endless_loop),
        cmocka_unit_test(test_upstream_full),
        cmocka_unit_test(test_upstream_defaults),
        cmocka_unit_test(test_upstream_health),
        cmocka_unit_test(test_upstream_url_normalisation),
        cmocka_unit_test(test_upstream_index_resolution),
        cmocka_unit_test(test_err_upstream_unknown_in_route),
        cmocka_unit_test(test_err_upstream_url_path),
        cmocka_unit_test(test_err_upstream_scheme),
        cmocka_unit_test(test_err_upstream_port),
        cmocka_unit_test(test_err_upstream_servers),
        cmocka_unit_test(test_err_upstream_balance),
        cmocka_unit_test(test_err_upstream_numbers_and_host),
        cmocka_unit_test(test_err_upstream_root_and_upstream),
        cmocka_unit_test(test_err_upstream_route_needs_one),
        cmocka_unit_test(test_err_upstream_tls),
        cmocka_unit_test(test_err_upstream_unknown_key),
        cmocka_unit_test(test_upstream_protocol),
        cmocka_unit_test(test_err_upstream_names_and_types),
        cmocka_unit_test(test_tls_full),
        cmocka_unit_test(test_tls_acme),
        cmocka_unit_test(test_err_tls_listen),
        cmocka_unit_test(test_http2),
        cmocka_unit_test(test_err_tls_table),
        cmocka_unit_test(test_err_tls_hosts),
        cmocka_unit_test(test_err_tls_files),
        cmocka_unit_test(test_err_tls_options),
        cmocka_unit_test(test_err_redirect_https),
        cmocka_unit_test(test_cache_full),
        cmocka_unit_test(test_cache_defaults),
        cmocka_unit_test(test_route_cache_default),
        cmocka_unit_test(test_cache_l2),
        cmocka_unit_test(test_err_route_cache),
        cmocka_unit_test(test_err_cache_table),
        cmocka_unit_test(test_err_cache_sizes),
        cmocka_unit_test(test_err_cache_seconds),
        cmocka_unit_test(test_err_cache_purge_allow),
        cmocka_unit_test(test_netmask_match),
        cmocka_unit_test(test_lualines),
        cmocka_unit_test(test_lualines_robust),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
