/* Unit tests of the runtime (src/server/runtime.c): what the server builds from a
 * configuration snapshot, and that it goes with the runtime's last reference. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "umbra/config.h"
#include "umbra/module.h"
#include "umbra/hooks.h"
#include "umbra/log.h"
#include "umbra/origin.h"
#include "umbra/runtime.h"

static char tmpdir[] = "/tmp/umbra-test-runtime-XXXXXX";
static char cfgpath[PATH_MAX];

static struct um_config *load(const char *text)
{
    FILE *f = fopen(cfgpath, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
    char err[1024] = "";
    struct um_config *c = um_config_load(cfgpath, err, sizeof err);
    if (c == NULL)
        fail_msg("unexpected error: %s", err);
    return c;
}

/* The runtime of c as the server builds it, for one worker. */
static struct um_runtime *build(struct um_config *c, char *err, size_t errlen)
{
    _Atomic(struct um_cache *) cache = NULL;
    struct um_runtime *rt = um_runtime_create(c, NULL, 1, &cache, NULL, err, errlen);
    assert_null(cache); /* no route of these tests caches */
    return rt;
}

static int destroyed;

static void fake_destroy(struct um_origin *o)
{
    destroyed++;
    free(o);
}

static const struct um_origin_ops fake_ops = {.destroy = fake_destroy};

/* (Moved from test_config.c when the origins left the snapshot.) The last reference
 * destroys the routes' origins, and no other does. */
static void test_refcount_and_origins(void **state)
{
    char err[1024] = "";
    struct um_config *c = load("routes = { { path = '/a/', root = '.' },\n"
                               "           { path = '/', root = '.' } }\n");
    struct um_runtime *rt = build(c, err, sizeof err);
    assert_non_null(rt);
    assert_ptr_equal(rt->config, c);
    assert_int_equal(um_config_refs(c), 2); /* the caller's and the runtime's */
    um_config_unref(c);
    for (size_t i = 0; i < c->num_routes; i++) {
        struct um_runtime_route *rr = &rt->routes[i];
        assert_ptr_equal(um_runtime_route(rt, &c->routes[i]), rr);
        assert_non_null(rr->origin);
        assert_true(rr->metrics_slot > 0);
        rr->origin->ops->destroy(rr->origin);
        struct um_origin *o = malloc(sizeof *o);
        assert_non_null(o);
        o->ops = &fake_ops;
        rr->origin = o;
    }
    destroyed = 0;
    um_runtime_ref(rt);
    um_runtime_ref(rt);
    um_runtime_unref(rt);
    um_runtime_unref(rt);
    assert_int_equal(destroyed, 0);
    assert_true(um_runtime_unused(rt));
    /* A cache fill holds the snapshot of its route, not the runtime: that counts too. */
    um_config_ref(rt->config);
    assert_false(um_runtime_unused(rt));
    um_config_unref(rt->config);
    assert_true(um_runtime_unused(rt));
    um_runtime_unref(rt); /* the last one: frees, and destroys both origins */
    assert_int_equal(destroyed, 2);
}

/* One origin per upstream, which the routes naming it share with req.upstream. */
static void test_upstreams(void **state)
{
    char err[1024] = "";
    struct um_config *c = load("upstreams = { a = { servers = 'http://127.0.0.1:9' },\n"
                               "              b = { servers = 'http://127.0.0.1:10' } }\n"
                               "routes = { { path = '/a/', upstream = 'a', cache = false },\n"
                               "           { path = '/', upstream = 'a', cache = false } }\n");
    struct um_runtime *rt = build(c, err, sizeof err);
    um_config_unref(c);
    assert_non_null(rt);
    assert_non_null(rt->upstreams[0]);
    assert_non_null(rt->upstreams[1]);
    /* Without hooks or cache, a route's origin is its upstream's. */
    assert_ptr_equal(rt->routes[0].origin, rt->upstreams[0]);
    assert_ptr_equal(rt->routes[1].origin, rt->upstreams[0]);
    um_runtime_unref(rt);
}

/* A route whose origin cannot be made fails the build at the route's line, and what was
 * built so far (the request states taken over included) goes. */
static void test_build_fails(void **state)
{
    char err[1024] = "", dir[PATH_MAX + 8], want[PATH_MAX + 64];
    snprintf(dir, sizeof dir, "%s/gone", tmpdir);
    assert_int_equal(mkdir(dir, 0755), 0);
    struct um_config *c = load("upstreams = { a = { servers = 'http://127.0.0.1:9' } }\n"
                               "routes = { { path = '/a/', upstream = 'a', cache = false },\n"
                               "           { path = '/', root = 'gone',\n"
                               "             on_request = function(req) end } }\n");
    assert_int_equal(rmdir(dir), 0);
    assert_null(build(c, err, sizeof err));
    snprintf(want, sizeof want, "%s:3: route /: cannot open root ", cfgpath);
    if (strncmp(err, want, strlen(want)) != 0)
        fail_msg("error '%s' does not start with '%s'", err, want);
    assert_int_equal(um_config_refs(c), 1);
    um_config_unref(c);
}

static int group_setup(void **state)
{
    if (mkdtemp(tmpdir) == NULL)
        return -1;
    snprintf(cfgpath, sizeof cfgpath, "%s/config.lua", tmpdir);
    um_log_level = UM_LOG_WARN;
    return 0;
}

static int group_teardown(void **state)
{
    unlink(cfgpath);
    return rmdir(tmpdir);
}

int main(void)
{
    um_modules_init(); /* the modules' settings, as the server's main does */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refcount_and_origins),
        cmocka_unit_test(test_upstreams),
        cmocka_unit_test(test_build_fails),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
