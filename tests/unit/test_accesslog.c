/* Access log lines (combined and JSON) and the metrics counters and label registry. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "umbra/accesslog.h"
#include "umbra/metrics.h"

static um_str S(const char *s)
{
    return (um_str){s, strlen(s)};
}

/* 2026-11-30T12:34:56.789Z */
#define NOW 1796042096

static struct um_access_rec rec(void)
{
    struct um_access_rec r;
    memset(&r, 0, sizeof(r));
    r.client_ip = "192.0.2.7";
    r.method = S("GET");
    r.target = S("/a?b=1");
    r.minor_version = 1;
    r.host = S("example.com");
    r.user_agent = S("curl/8");
    r.status = 200;
    r.body_bytes = 1234;
    r.cache_status = S("umbra; fwd=uri-miss; stored");
    r.upstream_ms = 42;
    r.duration_ms = 50;
    r.worker = 1;
    r.conn_id = 9;
    return r;
}

static void test_combined(void **state)
{
    (void)state;
    char out[1024];
    struct um_access_rec r = rec();
    size_t n = um_access_log_format(out, sizeof(out), UM_ACCESS_COMBINED, &r, NOW, 789);
    assert_int_equal(n, strlen(out));
    assert_string_equal(out, "192.0.2.7 - - [30/Nov/2026:12:34:56 +0000] \"GET /a?b=1 HTTP/1.1\" "
                             "200 1234 \"-\" \"curl/8\" \"umbra; fwd=uri-miss; stored\" 0.042\n");
}

static void test_combined_escapes_and_no_request(void **state)
{
    (void)state;
    char out[1024];
    struct um_access_rec r = rec();
    r.target = S("/\"x\"\\\x01\xff");
    r.referer = S("a b");
    r.cache_status = S("");
    r.upstream_ms = -1;
    um_access_log_format(out, sizeof(out), UM_ACCESS_COMBINED, &r, NOW, 0);
    assert_non_null(strstr(out, "\"GET /\\x22x\\x22\\x5C\\x01\\xFF HTTP/1.1\" 200 1234 \"a b\" "
                                "\"curl/8\" \"-\" -\n"));
    r.minor_version = -1;
    r.status = 400;
    um_access_log_format(out, sizeof(out), UM_ACCESS_COMBINED, &r, NOW, 0);
    assert_non_null(strstr(out, "] \"-\" 400 "));
}

/* The date of a line is the UTC date of its time, for any time (leap years, centuries,
 * the days around them): checked against gmtime_r. */
static void test_combined_dates_match_gmtime(void **state)
{
    (void)state;
    static const char *const months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                         "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    struct um_access_rec r = rec();
    char out[1024], want[64];
    /* From 1970 to past 2400, a week and 3,601 s at a time, and the seconds around a few
     * leap days and century ends. */
    int64_t special[] = {0, 86399, 86400, 951782399, 951782400, 951868800, 4107542399,
                         4107542400, 4107628800, 13574563200, 13574649599};
    size_t checked = 0;
    for (int64_t i = 0, t = 0; t < 13600000000; i++) {
        t = i < (int64_t)UM_NELEMS(special) ? special[i]
                                            : (i - (int64_t)UM_NELEMS(special)) * (7 * 86400 + 3601);
        if (i >= (int64_t)UM_NELEMS(special) && t >= 13600000000)
            break;
        checked++;
        time_t tt = (time_t)t;
        struct tm tm;
        assert_non_null(gmtime_r(&tt, &tm));
        snprintf(want, sizeof(want), "[%02d/%s/%04d:%02d:%02d:%02d +0000]", tm.tm_mday,
                 months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
        um_access_log_format(out, sizeof(out), UM_ACCESS_COMBINED, &r, t, 0);
        if (strstr(out, want) == NULL)
            fail_msg("t=%lld: want %s in %s", (long long)t, want, out);
    }
    assert_true(checked > 20000);
}

/* Escapes at either end of a field and between plain runs; HTTP/1.0; large numbers. */
static void test_combined_runs_and_numbers(void **state)
{
    (void)state;
    char out[1024];
    struct um_access_rec r = rec();
    r.target = S("\x7f/plain/run\"\\more\x80");
    r.minor_version = 0;
    r.body_bytes = 18446744073709551615ull;
    r.upstream_ms = 1234567;
    um_access_log_format(out, sizeof(out), UM_ACCESS_COMBINED, &r, NOW, 0);
    assert_non_null(strstr(out, "\"GET \\x7F/plain/run\\x22\\x5Cmore\\x80 HTTP/1.0\" 200 "
                                "18446744073709551615 \"-\" \"curl/8\" "
                                "\"umbra; fwd=uri-miss; stored\" 1234.567\n"));
    r.upstream_ms = 0;
    um_access_log_format(out, sizeof(out), UM_ACCESS_COMBINED, &r, NOW, 0);
    assert_non_null(strstr(out, "\" 0.000\n"));
}

static void test_json(void **state)
{
    (void)state;
    char out[1024];
    struct um_access_rec r = rec();
    r.user_agent = S("caf\xc3\xa9 \"q\"\n");
    um_access_log_format(out, sizeof(out), UM_ACCESS_JSON, &r, NOW, 789);
    assert_string_equal(out,
        "{\"time\":\"2026-11-30T12:34:56.789Z\",\"client\":\"192.0.2.7\",\"method\":\"GET\","
        "\"target\":\"/a?b=1\",\"protocol\":\"HTTP/1.1\",\"host\":\"example.com\",\"status\":200,"
        "\"bytes\":1234,\"referer\":\"\",\"user_agent\":\"caf\\u00c3\\u00a9 \\\"q\\\"\\u000a\","
        "\"cache_status\":\"umbra; fwd=uri-miss; stored\",\"upstream_time\":0.042,"
        "\"duration\":0.050,\"worker\":1,\"connection\":9}\n");
}

/* A tunnel's line (status 101, logged when it ends): its bytes each way and duration. */
static void test_tunnel_fields(void **state)
{
    (void)state;
    char out[1024];
    struct um_access_rec r = rec();
    r.status = 101;
    r.body_bytes = 300;
    r.cache_status = S("");
    r.tunnel = true;
    r.tunnel_up = 1000;
    r.tunnel_down = 300;
    r.duration_ms = 61500;
    um_access_log_format(out, sizeof(out), UM_ACCESS_COMBINED, &r, NOW, 0);
    assert_non_null(strstr(out, "\" 101 300 \"-\" \"curl/8\" \"-\" 0.042 tunnel up=1000 down=300 "
                                "time=61.500\n"));
    um_access_log_format(out, sizeof(out), UM_ACCESS_JSON, &r, NOW, 0);
    assert_non_null(strstr(out, "\"upstream_time\":0.042,\"tunnel_up\":1000,\"tunnel_down\":300,"
                                "\"duration\":61.500,"));
    /* Not a tunnel: neither. */
    r.tunnel = false;
    um_access_log_format(out, sizeof(out), UM_ACCESS_COMBINED, &r, NOW, 0);
    assert_null(strstr(out, "tunnel"));
}

static void test_truncation_reports_full_length(void **state)
{
    (void)state;
    char small[16], big[1024];
    struct um_access_rec r = rec();
    size_t full = um_access_log_format(big, sizeof(big), UM_ACCESS_JSON, &r, NOW, 0);
    size_t n = um_access_log_format(small, sizeof(small), UM_ACCESS_JSON, &r, NOW, 0);
    assert_int_equal(n, full);
    assert_int_equal(strlen(small), sizeof(small) - 1);
    assert_memory_equal(small, big, sizeof(small) - 1);
}

static void test_request_counts(void **state)
{
    (void)state;
    int slot = um_metrics_route_slot("/counted/");
    assert_true(slot > 0);
    assert_int_equal(um_metrics_route_slot("/counted/"), slot);
    assert_string_equal(um_metrics_route_label(slot), "/counted/");
    assert_string_equal(um_metrics_route_label(0), "none");
    struct um_metrics_worker *m = um_metrics_worker(); /* not a worker: the shared struct */
    /* The cache counters come from the typed result, not from the field's text. */
    struct um_cache_status miss = {.fwd = UM_FWD_URI_MISS, .fwd_status = 200, .stored = true};
    struct um_cache_status hit = {.hit = true, .has_ttl = true, .ttl = 5};
    struct um_cache_status coalesced = {.fwd = UM_FWD_URI_MISS, .collapsed = true};
    struct um_cache_status stale = {.fwd = UM_FWD_STALE, .fwd_status = 304};
    struct um_access_rec r = rec();
    r.route_slot = slot;
    r.bytes_out = 100;
    r.cache = &miss;
    um_access_log_request(NULL, NULL, &r); /* no config: counted, not logged */
    r.status = 503;
    r.cache = &hit;
    r.cache_status = S("umbra; fwd=uri-miss; stored"); /* not read by the counters */
    um_access_log_request(NULL, NULL, &r);
    r.cache = &coalesced;
    um_access_log_request(NULL, NULL, &r);
    r.cache = &stale;
    um_access_log_request(NULL, NULL, &r);
    r.cache = NULL; /* no cache involved: no cache counter moves */
    um_access_log_request(NULL, NULL, &r);
    assert_int_equal(um_counter_get(&m->requests[slot][1]), 1);
    assert_int_equal(um_counter_get(&m->requests[slot][4]), 4);
    assert_int_equal(um_counter_get(&m->bytes_out), 500);
    assert_int_equal(um_counter_get(&m->cache_misses), 1);
    assert_int_equal(um_counter_get(&m->cache_hits), 1);
    assert_int_equal(um_counter_get(&m->cache_coalesced), 1);
    assert_int_equal(um_counter_get(&m->cache_stale), 1);
    assert_int_equal(um_counter_get(&m->cache_revalidated), 1);
}

static void test_upstream_histogram(void **state)
{
    (void)state;
    int a = um_metrics_server_slot("app", "http://10.0.0.1:80");
    int b = um_metrics_server_slot("app", "http://10.0.0.2:80");
    assert_int_not_equal(a, b);
    assert_int_equal(um_metrics_server_slot("app", "http://10.0.0.1:80"), a);
    const char *up, *url;
    um_metrics_server_label(b, &up, &url);
    assert_string_equal(up, "app");
    assert_string_equal(url, "http://10.0.0.2:80");
    um_metrics_upstream_done(a, 3, false);     /* <= 5 ms */
    um_metrics_upstream_done(a, 5, false);     /* <= 5 ms */
    um_metrics_upstream_done(a, 700, true);    /* <= 1 s */
    um_metrics_upstream_done(a, 99999, true);  /* +Inf */
    const struct um_metrics_worker *m = um_metrics_worker();
    assert_int_equal(um_counter_get(&m->upstream_requests[a]), 4);
    assert_int_equal(um_counter_get(&m->upstream_errors[a]), 2);
    assert_int_equal(um_counter_get(&m->upstream_latency[a][0]), 2);
    assert_int_equal(um_counter_get(&m->upstream_latency[a][7]), 1);
    assert_int_equal(um_counter_get(&m->upstream_latency[a][UM_METRICS_LATENCY_BUCKETS]), 1);
    assert_int_equal(um_counter_get(&m->upstream_latency_ms_sum[a]), 3 + 5 + 700 + 99999);
    assert_int_equal(um_metrics_server_down_until_get(a), 0);
    um_metrics_server_down_until(a, 1234);
    assert_int_equal(um_metrics_server_down_until_get(a), 1234);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_combined),
        cmocka_unit_test(test_combined_escapes_and_no_request),
        cmocka_unit_test(test_combined_dates_match_gmtime),
        cmocka_unit_test(test_combined_runs_and_numbers),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_tunnel_fields),
        cmocka_unit_test(test_truncation_reports_full_length),
        cmocka_unit_test(test_request_counts),
        cmocka_unit_test(test_upstream_histogram),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
