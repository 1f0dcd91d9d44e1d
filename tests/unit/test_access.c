/* access.h: the allow/deny lists' network matching (IPv4, IPv6, IPv4-mapped), htpasswd
 * parsing (the schemes taken and refused, with the line named), Basic credentials and
 * the header rules, without a server. */
#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "../../src/access/access.c"
#include "umbra/context.h"
#include "umbra/http1.h"
#include "umbra/loop.h"

/* A netmask from text, as the loader makes it (family, bytes, prefix). */
static struct um_netmask mask(const char *text)
{
    struct um_netmask m;
    memset(&m, 0, sizeof m);
    char buf[64];
    snprintf(buf, sizeof buf, "%s", text);
    char *slash = strchr(buf, '/');
    if (slash) *slash = '\0';
    if (inet_pton(AF_INET, buf, m.addr) == 1) {
        m.family = AF_INET;
        m.prefix = slash ? atoi(slash + 1) : 32;
    } else {
        assert_int_equal(inet_pton(AF_INET6, buf, m.addr), 1);
        m.family = AF_INET6;
        m.prefix = slash ? atoi(slash + 1) : 128;
    }
    return m;
}

static enum um_access_result check_ip(const struct um_access_conf *a, const char *ip)
{
    struct um_request req;
    memset(&req, 0, sizeof req);
    struct um_access_job job;
    memset(&job, 0, sizeof job);
    return um_access_check(a, &req, ip, &job);
}

static void test_allow_ipv4(void **state)
{
    (void)state;
    struct um_netmask allow[] = {mask("10.0.0.0/8"), mask("192.168.1.7")};
    struct um_access_conf a = {.allow = allow, .num_allow = 2, .has_allow = true};
    assert_int_equal(check_ip(&a, "10.1.2.3"), UM_ACCESS_OK);
    assert_int_equal(check_ip(&a, "10.255.255.255"), UM_ACCESS_OK);
    assert_int_equal(check_ip(&a, "11.0.0.1"), UM_ACCESS_FORBIDDEN);
    assert_int_equal(check_ip(&a, "9.255.255.255"), UM_ACCESS_FORBIDDEN);
    assert_int_equal(check_ip(&a, "192.168.1.7"), UM_ACCESS_OK);
    assert_int_equal(check_ip(&a, "192.168.1.8"), UM_ACCESS_FORBIDDEN);
    /* An IPv4-mapped IPv6 client is its IPv4 address. */
    assert_int_equal(check_ip(&a, "::ffff:10.9.9.9"), UM_ACCESS_OK);
    assert_int_equal(check_ip(&a, "::1"), UM_ACCESS_FORBIDDEN);
    assert_int_equal(check_ip(&a, "not an address"), UM_ACCESS_FORBIDDEN);
}

static void test_allow_ipv6_and_odd_prefixes(void **state)
{
    (void)state;
    struct um_netmask allow[] = {mask("::1"), mask("2001:db8::/33"), mask("172.16.0.0/12")};
    struct um_access_conf a = {.allow = allow, .num_allow = 3, .has_allow = true};
    assert_int_equal(check_ip(&a, "::1"), UM_ACCESS_OK);
    assert_int_equal(check_ip(&a, "::2"), UM_ACCESS_FORBIDDEN);
    assert_int_equal(check_ip(&a, "2001:db8:7fff::1"), UM_ACCESS_OK);
    assert_int_equal(check_ip(&a, "2001:db8:8000::1"), UM_ACCESS_FORBIDDEN); /* bit 33 */
    assert_int_equal(check_ip(&a, "172.31.255.255"), UM_ACCESS_OK);
    assert_int_equal(check_ip(&a, "172.32.0.0"), UM_ACCESS_FORBIDDEN);
    assert_int_equal(check_ip(&a, "127.0.0.1"), UM_ACCESS_FORBIDDEN);
}

static void test_deny_before_allow(void **state)
{
    (void)state;
    struct um_netmask allow[] = {mask("0.0.0.0/0"), mask("::/0")};
    struct um_netmask deny[] = {mask("10.0.0.0/8"), mask("fd00::/8")};
    struct um_access_conf a = {
        .allow = allow, .num_allow = 2, .has_allow = true, .deny = deny, .num_deny = 2};
    assert_int_equal(check_ip(&a, "10.0.0.1"), UM_ACCESS_FORBIDDEN);
    assert_int_equal(check_ip(&a, "fd12::1"), UM_ACCESS_FORBIDDEN);
    assert_int_equal(check_ip(&a, "fe80::1"), UM_ACCESS_OK);
    assert_int_equal(check_ip(&a, "1.2.3.4"), UM_ACCESS_OK);
    /* Deny alone: everyone else passes. */
    struct um_access_conf d = {.deny = deny, .num_deny = 2};
    assert_int_equal(check_ip(&d, "10.0.0.1"), UM_ACCESS_FORBIDDEN);
    assert_int_equal(check_ip(&d, "11.0.0.1"), UM_ACCESS_OK);
}

/* ---------------------------------------------------------------- htpasswd */

/* Hashes of "pw" as htpasswd -B (bcrypt), -2 (SHA-256-crypt) and -5 (SHA-512-crypt)
 * wrote them. */
#define SHA256_PW "$5$ODGQyabk6DIxhEeP$S.TuiezRb0i9AEaVrLyUX2.L0WxuPKK9EY/Q2iEqs/3"
#define BCRYPT_PW "$2y$05$ChXShOnPF58UftxfOKsNLuQEdVOCTh7nA4vJZKwWYP5bXLpvjatk6"
#define SHA512_PW                                                                                  \
    "$6$iA0tU5o2Kcc/oSil$9FgDXI9UhWVHpm/kKQtWcT1EJfP.N/"                                           \
    "SwKxz4rA6O5rHNsiRd3awbpHykBQwpW2GwliOb5CjecOKMAzwam.yvT."

static bool parse(const char *text, struct um_access_user **u, size_t *n, char *err)
{
    return um_access_parse_htpasswd(text, strlen(text), u, n, err, 256);
}

static void test_htpasswd_taken(void **state)
{
    (void)state;
    struct um_access_user *u;
    size_t n;
    char err[256];
    const char *text = "# staff\r\n\nann:" BCRYPT_PW "\r\n  \nsam:" SHA256_PW "\nsue:" SHA512_PW;
    assert_true(parse(text, &u, &n, err));
    assert_int_equal(n, 3);
    assert_string_equal(u[0].name, "ann");
    assert_string_equal(u[0].hash, BCRYPT_PW);
    assert_string_equal(u[1].name, "sam");
    assert_string_equal(u[2].hash, SHA512_PW);
    um_access_users_free(u, n);
    assert_true(parse("", &u, &n, err));
    assert_int_equal(n, 0);
    um_access_users_free(u, n);
}

#define REFUSED(text, needle)                                                                      \
    do {                                                                                           \
        struct um_access_user *u_;                                                                 \
        size_t n_;                                                                                 \
        char err_[256] = "";                                                                       \
        assert_false(parse(text, &u_, &n_, err_));                                                 \
        if (strstr(err_, needle) == NULL) fail_msg("'%s' lacks '%s'", err_, needle);               \
    } while (0)

static void test_htpasswd_refused(void **state)
{
    (void)state;
    REFUSED("ann:" BCRYPT_PW "\n#\nbob:$apr1$McQri/ds$otkzE1D25sAFOsL0bWHS9/\n",
            "line 3: user 'bob' has an MD5 hash ($apr1$)");
    REFUSED("dan:abJnggxhB/yWI\n", "line 1: user 'dan' has a crypt(3) DES hash");
    REFUSED("\ncarl:secret\n", "line 2: user 'carl' has a plain-text password");
    REFUSED("eve:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\n", "SHA-1");
    REFUSED("no colon here\n", "line 1: expected \"user:hash\"");
    REFUSED(":" BCRYPT_PW "\n", "line 1:");
    REFUSED("ann:\n", "line 1:");
    REFUSED("ann:" BCRYPT_PW "\nann:" SHA512_PW "\n", "line 2: user 'ann' is listed twice");
    REFUSED("ann:$2y$05$tooshort\n", "does not take");
}

static void test_crypt_check(void **state)
{
    (void)state;
    /* Made here, so that the test does not depend on a hash written by hand. */
    struct crypt_data cd;
    memset(&cd, 0, sizeof cd);
    const char *h = crypt_rn("right", "$5$0123456789abcdef", &cd, (int)sizeof cd);
    assert_non_null(h);
    char hash[256];
    snprintf(hash, sizeof hash, "%s", h);
    assert_true(um_access_crypt_check("right", hash));
    assert_false(um_access_crypt_check("wrong", hash));
    assert_false(um_access_crypt_check("", hash));
    assert_false(um_access_crypt_check("right", "$5$0123456789abcdef$AAAA"));
    /* What htpasswd wrote. */
    assert_true(um_access_crypt_check("pw", BCRYPT_PW));
    assert_false(um_access_crypt_check("pW", BCRYPT_PW));
    assert_true(um_access_crypt_check("pw", SHA256_PW));
    assert_true(um_access_crypt_check("pw", SHA512_PW));
}

/* ---------------------------------------------------------------- Basic credentials */

/* cred as parse_basic leaves it: "user:pass", the user's length in *ul. */
static bool basic(const char *field, char *user, char *pass)
{
    char cred[CRED_MAX];
    size_t len, ul;
    if (!parse_basic((um_str){field, strlen(field)}, cred, &len, &ul)) return false;
    snprintf(user, 256, "%.*s", (int)ul, cred);
    snprintf(pass, 256, "%.*s", (int)(len - ul - 1), cred + ul + 1);
    return true;
}

static void test_basic_parse(void **state)
{
    (void)state;
    char u[256], p[256];
    /* "ann:pw:with:colons" */
    assert_true(basic("Basic YW5uOnB3OndpdGg6Y29sb25z", u, p));
    assert_string_equal(u, "ann");
    assert_string_equal(p, "pw:with:colons");
    assert_true(basic("basic   YTpi", u, p)); /* a:b */
    assert_string_equal(p, "b");
    assert_true(basic("Basic YTo=", u, p)); /* "a:" */
    assert_string_equal(p, "");
    assert_false(basic("Bearer YTpi", u, p));
    assert_false(basic("Basic", u, p));
    assert_false(basic("Basic !!!!", u, p));
    assert_false(basic("Basic YWJj", u, p)); /* no ':' */
    assert_false(basic("Basic OmI=", u, p)); /* ":b" */
}

static struct um_access_user user_of(const char *name, const char *hash)
{
    return (struct um_access_user){
        .name = (char *)name, .hash = (char *)hash, .name_len = strlen(name)};
}

/* A verified password is found in the cache; the same value under another file's key (a
 * changed hash) is not, nor another value. */
static void test_cache_keyed_by_hash(void **state)
{
    (void)state;
    struct um_access_user x[] = {user_of("ann", "$5$a$x"), user_of("bob", "$5$a$z")};
    struct um_access_user y[] = {user_of("ann", "$5$a$y"), user_of("bob", "$5$a$z")};
    uint64_t kx[2], ky[2], kx2[2];
    um_access_auth_key(x, 2, kx);
    um_access_auth_key(y, 2, ky);
    um_access_auth_key(x, 2, kx2);
    assert_memory_equal(kx, kx2, sizeof kx);
    assert_memory_not_equal(kx, ky, sizeof kx);
    unsigned char m1[MAC_LEN], m2[MAC_LEN], m3[MAC_LEN];
    credentials_tag(kx, "Basic YW5uOnB3", 14, m1);
    credentials_tag(ky, "Basic YW5uOnB3", 14, m2);
    credentials_tag(kx, "Basic YW5uOnB4", 14, m3);
    assert_memory_not_equal(m1, m2, MAC_LEN);
    assert_memory_not_equal(m1, m3, MAC_LEN);
    assert_false(cache_has(m1));
    cache_put(m1);
    assert_true(cache_has(m1));
    assert_false(cache_has(m2));
}

/* The check: an unknown user and a wrong scheme get 401 without a job; a known user's
 * password not yet verified fills the job with what the verifier needs; once its tag is
 * in the cache the same request passes at once. */
static void test_check_cached(void **state)
{
    (void)state;
    struct um_access_user users[] = {user_of("bob", SHA256_PW), user_of("ann", SHA512_PW)};
    struct um_access_auth auth = {.users = users, .num_users = 2};
    um_access_auth_key(users, 2, auth.tag_key);
    struct um_access_conf a = {.auth = &auth};
    static struct um_request req; /* large: not on the stack */
    memset(&req, 0, sizeof req);
    struct um_header *h = req.headers;
    h[0] = (struct um_header){UM_STR("Authorization"), UM_STR("Basic YW5uOnB3")}; /* ann:pw */
    req.num_headers = 1;
    struct um_access_job job;
    memset(&job, 0, sizeof job);
    assert_int_equal(um_access_check(&a, &req, "127.0.0.1", &job), UM_ACCESS_VERIFY);
    assert_string_equal(job.user, "ann");
    assert_string_equal(job.pass, "pw");
    assert_string_equal(job.hash, SHA512_PW);
    unsigned char m[MAC_LEN];
    credentials_tag(auth.tag_key, "Basic YW5uOnB3", 14, m);
    assert_memory_equal(job.tag, m, MAC_LEN);
    cache_put(m);
    memset(&job, 0, sizeof job);
    assert_int_equal(um_access_check(&a, &req, "127.0.0.1", &job), UM_ACCESS_OK);
    assert_string_equal(job.pass, "");
    h[0].value = (um_str)UM_STR("Basic Ym9iOnB3"); /* bob:pw, not verified */
    assert_int_equal(um_access_check(&a, &req, "127.0.0.1", &job), UM_ACCESS_VERIFY);
    h[0].value = (um_str)UM_STR("Basic ZXZlOnB3"); /* eve:pw, no such user */
    memset(&job, 0, sizeof job);
    assert_int_equal(um_access_check(&a, &req, "127.0.0.1", &job), UM_ACCESS_UNAUTHORIZED);
    assert_string_equal(job.user, "");
}

/* ---------------------------------------------------------------- a worker's stop */

static int jobs_back;
static void job_back(struct um_task *t)
{
    struct um_access_job *j = um_container_of(t, struct um_access_job, task);
    assert_false(j->ok);
    jobs_back++;
    free(j);
}

/* A worker that stops takes back its jobs (its requesters gone): the one being hashed,
 * once done, and the queued ones, each given to its callback before the stop returns;
 * nothing is left that the verifier could post to the loop freed next. */
static void test_worker_stop_takes_jobs_back(void **state)
{
    (void)state;
    /* bcrypt at cost 12: a few hundred milliseconds a check, long enough to stop during. */
    char salt[64];
    assert_non_null(crypt_gensalt_rn("$2b$", 12, NULL, 0, salt, sizeof salt));
    struct crypt_data cd;
    memset(&cd, 0, sizeof cd);
    const char *hash = crypt_r("secret", salt, &cd);
    assert_non_null(hash);
    struct um_loop *l = um_loop_create();
    struct um_context ctx;
    um_context_init(&ctx, l, 0);
    jobs_back = 0;
    for (int i = 0; i < 3; i++) {
        struct um_access_job *j = calloc(1, sizeof *j);
        j->task.cb = job_back;
        j->loop = l;
        snprintf(j->user, sizeof j->user, "ann");
        snprintf(j->pass, sizeof j->pass, "secret");
        snprintf(j->hash, sizeof j->hash, "%s", hash);
        assert_true(um_access_verify(&ctx, j));
    }
    struct timespec ts = {0, 30 * 1000 * 1000};
    nanosleep(&ts, NULL); /* the verifier takes the first */
    um_context_stop(&ctx);
    assert_int_equal(jobs_back, 3);
    pthread_mutex_lock(&queue_lock);
    assert_int_equal(queue_len, 0);
    assert_null(queue_head);
    assert_null(busy);
    pthread_mutex_unlock(&queue_lock);
    um_context_dispose(&ctx);
    um_loop_destroy(l);
}

/* ---------------------------------------------------------------- header rules */

static void test_rules(void **state)
{
    (void)state;
    struct um_access_field set[] = {{UM_STR("X-A"), UM_STR("1")}};
    struct um_access_field add[] = {{UM_STR("X-C"), UM_STR("c2")}};
    um_str rm[] = {UM_STR("server")};
    struct um_access_headers g = {
        .response = {
            .set = set, .num_set = 1, .add = add, .num_add = 1, .remove = rm, .num_remove = 1}};
    struct um_access_conf a = {.global = &g};
    struct um_header in[] = {{UM_STR("x-a"), UM_STR("old")},
                             {UM_STR("Server"), UM_STR("o")},
                             {UM_STR("X-C"), UM_STR("c1")},
                             {UM_STR("X-A"), UM_STR("old2")}};
    struct um_header out[16];
    assert_true(um_access_has_response_rules(&a));
    size_t n = um_access_response(&a, in, 4, out, 16);
    assert_int_equal(n, 3);
    assert_true(um_str_eq(out[0].name, "X-C") && um_str_eq(out[0].value, "c1"));
    assert_true(um_str_eq(out[1].name, "X-A") && um_str_eq(out[1].value, "1"));
    assert_true(um_str_eq(out[2].name, "X-C") && um_str_eq(out[2].value, "c2"));
    struct um_access_conf none = {0};
    assert_false(um_access_has_response_rules(&none));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_allow_ipv4),
        cmocka_unit_test(test_allow_ipv6_and_odd_prefixes),
        cmocka_unit_test(test_deny_before_allow),
        cmocka_unit_test(test_htpasswd_taken),
        cmocka_unit_test(test_htpasswd_refused),
        cmocka_unit_test(test_crypt_check),
        cmocka_unit_test(test_basic_parse),
        cmocka_unit_test(test_cache_keyed_by_hash),
        cmocka_unit_test(test_check_cached),
        cmocka_unit_test(test_worker_stop_takes_jobs_back),
        cmocka_unit_test(test_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
