/* The admin and access_log settings of config.lua: defaults, values, and errors with their
 * line. */
#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "umbra/config.h"
#include "umbra/accesslog.h"
#include "umbra/module.h"

static char dir[] = "/tmp/umbra-test-opsconfig-XXXXXX";
static char real[PATH_MAX], cfgpath[PATH_MAX + 32];

static struct um_config *load(const char *text, char *err, size_t errlen)
{
    FILE *f = fopen(cfgpath, "w");
    assert_non_null(f);
    fprintf(f, "routes = { { path = \"/\", root = \".\" } }\n%s", text);
    fclose(f);
    return um_config_load(cfgpath, err, errlen);
}

static void load_fails(const char *text, const char *want)
{
    char err[512];
    struct um_config *c = load(text, err, sizeof(err));
    if (c != NULL)
        fail_msg("accepted: %s", text);
    if (strstr(err, want) == NULL)
        fail_msg("error \"%s\" lacks \"%s\"", err, want);
}

static int setup(void **state)
{
    (void)state;
    if (mkdtemp(dir) == NULL || realpath(dir, real) == NULL)
        return -1;
    snprintf(cfgpath, sizeof(cfgpath), "%s/config.lua", real);
    char logs[PATH_MAX + 8];
    snprintf(logs, sizeof(logs), "%s/logs", real);
    return mkdir(logs, 0755);
}

static int teardown(void **state)
{
    (void)state;
    char p[PATH_MAX + 16];
    unlink(cfgpath);
    snprintf(p, sizeof(p), "%s/logs", real);
    rmdir(p);
    rmdir(real);
    return 0;
}

static void test_defaults(void **state)
{
    (void)state;
    char err[512];
    struct um_config *c = load("", err, sizeof(err));
    assert_non_null(c);
    assert_false(c->admin.enabled);
    assert_false(um_access_log_conf(c)->enabled);
    um_config_unref(c);
}

static void test_values(void **state)
{
    (void)state;
    char err[512], want[PATH_MAX + 32];
    struct um_config *c = load("admin = { listen = \"127.0.0.1:9145\", allow = { \"10.0.0.0/8\" } }\n"
                               "access_log = { path = \"logs/a.log\", format = \"json\" }\n",
                               err, sizeof(err));
    if (c == NULL)
        fail_msg("%s", err);
    assert_true(c->admin.enabled);
    assert_string_equal(c->admin.listen.text, "127.0.0.1:9145");
    assert_int_equal(ntohs(((struct sockaddr_in *)&c->admin.listen.addr)->sin_port), 9145);
    assert_int_equal(c->admin.num_allow, 1);
    assert_int_equal(c->admin.allow[0].prefix, 8);
    struct sockaddr_in in = {.sin_family = AF_INET};
    inet_pton(AF_INET, "10.1.2.3", &in.sin_addr);
    assert_true(um_netmask_match(c->admin.allow, c->admin.num_allow, (struct sockaddr *)&in));
    inet_pton(AF_INET, "127.0.0.1", &in.sin_addr);
    assert_false(um_netmask_match(c->admin.allow, c->admin.num_allow, (struct sockaddr *)&in));
    assert_true(um_access_log_conf(c)->enabled);
    assert_int_equal(um_access_log_conf(c)->format, UM_ACCESS_JSON);
    snprintf(want, sizeof(want), "%s/logs/a.log", real);
    assert_string_equal(um_access_log_conf(c)->path, want);
    um_config_unref(c);

    c = load("access_log = { path = \"stderr\" }\nadmin = false\n", err, sizeof(err));
    assert_non_null(c);
    assert_true(um_access_log_conf(c)->enabled);
    assert_null(um_access_log_conf(c)->path);
    assert_int_equal(um_access_log_conf(c)->format, UM_ACCESS_COMBINED);
    assert_false(c->admin.enabled);
    um_config_unref(c);
}

static void test_errors(void **state)
{
    (void)state;
    load_fails("\nadmin = { listen = \"nohost\" }\n", "config.lua:3: admin.listen: bad address");
    load_fails("admin = { }\n", "config.lua:2: admin: missing listen");
    load_fails("admin = { listen = \"127.0.0.1:1\", allow = \"300.1.1.1\" }\n",
               "config.lua:2: admin.allow: bad IPv4 address");
    load_fails("listen = { \"127.0.0.1:7000\" }\nadmin = { listen = \"127.0.0.1:7000\" }\n",
               "config.lua:3: admin.listen: '127.0.0.1:7000' is also in listen");
    load_fails("access_log = {\n  path = \"nowhere/x.log\",\n}\n",
               "config.lua:3: access_log.path: no such directory");
    load_fails("access_log = { path = \"logs/\" }\n", "access_log.path: 'logs/' names a folder");
    load_fails("access_log = { path = \"a.log\",\n format = \"clf\" }\n",
               "config.lua:3: access_log.format: expected one of: combined, json");
    load_fails("access_log = true\n", "config.lua:2: access_log: expected a table");
    load_fails("access_log = { file = \"a.log\" }\n", "unknown key 'file'");
}

int main(void)
{
    um_modules_init(); /* the modules' settings, as the server's main does */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
