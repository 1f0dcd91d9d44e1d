/* Unit tests for src/http/field.c and chars.c: HTTP dates, Range, entity-tag lists, and the
 * character classes.
 *
 * The .c is included to reach date_parse_at, which takes the clock as a parameter so that
 * the RFC 850 two-digit-year rule can be tested at any "now". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "http/field.c"

/* Copies s so that it ends right before a PROT_NONE page: a parser that reads one byte
 * past the end crashes instead of passing (picohttpparser's trick). Four slots, reused
 * round robin, so up to four guarded strings can be alive at once. */
struct guard_slot {
    char *map;
    size_t data; /* readable bytes before the guard page */
};
static struct guard_slot guard_slots[4];
static unsigned guard_next;

static um_str guard(const char *s, size_t len)
{
    struct guard_slot *g = &guard_slots[guard_next++ % UM_NELEMS(guard_slots)];
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    if (g->map == NULL || len > g->data) {
        if (g->map != NULL) munmap(g->map, g->data + pg);
        g->data = len == 0 ? pg : (len + pg - 1) / pg * pg;
        g->map =
            mmap(NULL, g->data + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        assert_true(g->map != MAP_FAILED);
        assert_int_equal(mprotect(g->map + g->data, pg, PROT_NONE), 0);
    }
    char *p = g->map + g->data - len;
    if (len > 0) memcpy(p, s, len);
    return (um_str){p, len};
}

static um_str guard_cstr(const char *s)
{
    return guard(s, strlen(s));
}

/* ---- dates ---------------------------------------------------------------------------- */

/* 2025-06-01T00:00:00Z, the "now" for RFC 850 tests unless a test says otherwise. */
#define NOW_2025 ((time_t)1748736000)

static const char *const t_wkday[7] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
static const char *const t_weekday[7] = {"Sunday",   "Monday", "Tuesday", "Wednesday",
                                         "Thursday", "Friday", "Saturday"};
static const char *const t_month[12] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

static void check_format(time_t t, const char *want)
{
    char out[UM_HTTP_DATE_LEN + 1];
    memset(out, 'x', sizeof(out));
    um_http_date_format(t, out);
    assert_string_equal(out, want);
}

static bool parse_at(const char *s, time_t now, time_t *t)
{
    return date_parse_at(guard_cstr(s), now, t);
}

static void assert_parses(const char *s, time_t now, time_t want)
{
    time_t t = 12345;
    if (!parse_at(s, now, &t)) fail_msg("did not parse: \"%s\"", s);
    if (t != want) fail_msg("\"%s\": got %lld, want %lld", s, (long long)t, (long long)want);
}

static void assert_rejects(const char *s, time_t now)
{
    time_t t = 12345;
    if (parse_at(s, now, &t)) fail_msg("parsed but must not: \"%s\" -> %lld", s, (long long)t);
    assert_int_equal(t, 12345); /* untouched on failure */
}

static void test_list_next(void **state)
{
    (void)state;
    const char *v = " close ,, Keep-Alive,x-a\t,";
    um_str list = {v, strlen(v)}, item;
    const char *want[] = {"close", "", "Keep-Alive", "x-a", ""};
    size_t pos = 0, n = 0;
    while (um_http_list_next(list, &pos, &item)) {
        assert_true(n < 5);
        assert_int_equal(item.len, strlen(want[n]));
        assert_memory_equal(item.base, want[n], item.len);
        n++;
    }
    assert_int_equal(n, 4); /* the empty member after the last comma ends the list */
    pos = 0;
    assert_false(um_http_list_next((um_str){"", 0}, &pos, &item));
}

static void test_date_format_known(void **state)
{
    check_format(0, "Thu, 01 Jan 1970 00:00:00 GMT");
    check_format(784111777, "Sun, 06 Nov 1994 08:49:37 GMT");
    check_format(-1, "Wed, 31 Dec 1969 23:59:59 GMT");
    check_format(951782400, "Tue, 29 Feb 2000 00:00:00 GMT");
    check_format(1709164800, "Thu, 29 Feb 2024 00:00:00 GMT");
    check_format(1709251199, "Thu, 29 Feb 2024 23:59:59 GMT");
    check_format(1709251200, "Fri, 01 Mar 2024 00:00:00 GMT");
    check_format(INT32_MAX, "Tue, 19 Jan 2038 03:14:07 GMT");
    check_format((time_t)INT32_MAX + 1, "Tue, 19 Jan 2038 03:14:08 GMT");
    check_format((time_t)UINT32_MAX, "Sun, 07 Feb 2106 06:28:15 GMT");
    /* 2100 is not a leap year: 28 Feb is followed by 1 Mar. */
    check_format(4107456000, "Sun, 28 Feb 2100 00:00:00 GMT");
    check_format(4107542400, "Mon, 01 Mar 2100 00:00:00 GMT");
    check_format(-2208988800, "Mon, 01 Jan 1900 00:00:00 GMT");
    check_format(DATE_MAX, "Fri, 31 Dec 9999 23:59:59 GMT");
    check_format(DATE_MIN, "Mon, 01 Jan 0001 00:00:00 GMT");
}

static void test_date_format_clamps(void **state)
{
    /* A four-digit year cannot say more; clamped rather than a garbled field. */
    check_format(DATE_MAX + 1, "Fri, 31 Dec 9999 23:59:59 GMT");
    check_format(INT64_MAX, "Fri, 31 Dec 9999 23:59:59 GMT");
    check_format(DATE_MIN - 1, "Mon, 01 Jan 0001 00:00:00 GMT");
    check_format(INT64_MIN, "Mon, 01 Jan 0001 00:00:00 GMT");
}

/* Checks formatting against libc's gmtime_r and parsing of all three formats against the
 * original time, for t spread over years 1..9999 and dense around 1970 and 2038. */
static void check_against_libc(time_t t)
{
    struct tm tm;
    assert_non_null(gmtime_r(&t, &tm));
    long long year = (long long)tm.tm_year + 1900;

    char want[64], got[UM_HTTP_DATE_LEN + 1];
    snprintf(want, sizeof(want), "%s, %02d %s %04lld %02d:%02d:%02d GMT", t_wkday[tm.tm_wday],
             tm.tm_mday, t_month[tm.tm_mon], year, tm.tm_hour, tm.tm_min, tm.tm_sec);
    um_http_date_format(t, got);
    assert_string_equal(got, want);

    time_t back = 0;
    assert_true(um_http_date_parse(guard(got, UM_HTTP_DATE_LEN), &back));
    assert_int_equal(back, t);

    char asc[64];
    snprintf(asc, sizeof(asc), "%s %s %2d %02d:%02d:%02d %04lld", t_wkday[tm.tm_wday],
             t_month[tm.tm_mon], tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, year);
    back = 0;
    assert_true(date_parse_at(guard_cstr(asc), NOW_2025, &back));
    assert_int_equal(back, t);

    /* RFC 850 names only two digits of the year: parse it with a "now" 10 years later,
     * well inside the window that maps back to the right century. */
    char r850[64];
    snprintf(r850, sizeof(r850), "%s, %02d-%s-%02lld %02d:%02d:%02d GMT", t_weekday[tm.tm_wday],
             tm.tm_mday, t_month[tm.tm_mon], year % 100, tm.tm_hour, tm.tm_min, tm.tm_sec);
    time_t now = t + (time_t)10 * 365 * 86400;
    back = 0;
    assert_true(date_parse_at(guard_cstr(r850), now, &back));
    assert_int_equal(back, t);
}

static void test_date_roundtrip_wide(void **state)
{
    /* A step coprime with 86400 and 7 visits every time of day and weekday. */
    for (int64_t t = DATE_MIN; t <= DATE_MAX; t += 7919LL * 3607)
        check_against_libc((time_t)t);
    check_against_libc((time_t)DATE_MIN);
    check_against_libc((time_t)DATE_MAX);
}

static void test_date_roundtrip_days(void **state)
{
    /* Every day from 1900 to 2200 (every leap day, every month end), at a time of day
     * that moves. */
    for (int64_t d = -25567; d <= 84006; d++)
        check_against_libc((time_t)(d * 86400 + (d * 3917) % 86400));
    /* Every second around 1970-01-01 and around the 32-bit rollover. */
    for (int64_t t = -3 * 86400; t <= 3 * 86400; t += 1)
        check_against_libc((time_t)t);
    for (int64_t t = (int64_t)INT32_MAX - 100000; t <= (int64_t)INT32_MAX + 100000; t++)
        check_against_libc((time_t)t);
}

static void test_date_three_formats(void **state)
{
    /* The example of RFC 9110 section 5.6.7. */
    assert_parses("Sun, 06 Nov 1994 08:49:37 GMT", NOW_2025, 784111777);
    assert_parses("Sunday, 06-Nov-94 08:49:37 GMT", NOW_2025, 784111777);
    assert_parses("Sun Nov  6 08:49:37 1994", NOW_2025, 784111777);
    /* asctime's day may also be two digits. */
    assert_parses("Sun Nov 06 08:49:37 1994", NOW_2025, 784111777);
    assert_parses("Thu, 01 Jan 1970 00:00:00 GMT", NOW_2025, 0);
    assert_parses("Thu Jan  1 00:00:00 1970", NOW_2025, 0);
    /* In 2025, "70" is 2070: not more than 50 years ahead. */
    assert_parses("Thursday, 01-Jan-70 00:00:00 GMT", NOW_2025, 3155760000);
    assert_parses("Thursday, 01-Jan-70 00:00:00 GMT", 0, 0);
    assert_parses("Tue, 29 Feb 2000 12:00:00 GMT", NOW_2025, 951825600);
    assert_parses("Wed, 31 Dec 1969 23:59:59 GMT", NOW_2025, -1);
    assert_parses("Tue, 19 Jan 2038 03:14:08 GMT", NOW_2025, (time_t)INT32_MAX + 1);
    assert_parses("Fri, 31 Dec 9999 23:59:59 GMT", NOW_2025, DATE_MAX);
    /* Every weekday and month name. */
    for (int m = 0; m < 12; m++) {
        for (int w = 0; w < 7; w++) {
            char s[64];
            time_t want = (time_t)days_from_civil(2001, (unsigned)m + 1, 10) * 86400;
            snprintf(s, sizeof(s), "%s, 10 %s 2001 00:00:00 GMT", t_wkday[w], t_month[m]);
            assert_parses(s, NOW_2025, want);
            snprintf(s, sizeof(s), "%s, 10-%s-01 00:00:00 GMT", t_weekday[w], t_month[m]);
            assert_parses(s, NOW_2025, want);
            snprintf(s, sizeof(s), "%s %s 10 00:00:00 2001", t_wkday[w], t_month[m]);
            assert_parses(s, NOW_2025, want);
        }
    }
}

static void test_date_whitespace_around(void **state)
{
    /* OWS around a field value is not part of it (RFC 9110 section 5.5). */
    assert_parses("  Sun, 06 Nov 1994 08:49:37 GMT\t", NOW_2025, 784111777);
    assert_parses(" Sun Nov  6 08:49:37 1994 ", NOW_2025, 784111777);
}

static void test_date_weekday_not_checked(void **state)
{
    /* The day name must be a day name, but it is not cross-checked with the date (as
     * nginx and most caches do): the date fields are what count. */
    assert_parses("Mon, 06 Nov 1994 08:49:37 GMT", NOW_2025, 784111777);
}

static void test_date_leap_second(void **state)
{
    assert_parses("Sat, 31 Dec 2016 23:59:60 GMT", NOW_2025, 1483228800);
    assert_rejects("Sat, 31 Dec 2016 23:59:61 GMT", NOW_2025);
}

static void test_date_rfc850_century(void **state)
{
    /* now = 2025-06-01T00:00:00Z: the window reaches up to 2075-06-01T00:00:00Z. */
    assert_parses("Sunday, 06-Nov-94 08:49:37 GMT", NOW_2025, 784111777);
    assert_parses("Saturday, 01-Jun-75 00:00:00 GMT", NOW_2025, 3326572800); /* 2075 */
    assert_parses("Saturday, 01-Jun-75 00:00:01 GMT", NOW_2025, 170812801);  /* 1975 */
    assert_parses("Sunday, 02-Jun-75 00:00:00 GMT", NOW_2025, 170899200);    /* 1975 */
    assert_parses("Sunday, 01-Jun-25 00:00:00 GMT", NOW_2025, NOW_2025);
    assert_parses("Saturday, 01-Jan-00 00:00:00 GMT", NOW_2025, 946684800); /* 2000 */
    assert_parses("Friday, 31-Dec-99 23:59:59 GMT", NOW_2025, 946684799);   /* 1999 */
    assert_parses("Friday, 01-Jan-49 00:00:00 GMT", NOW_2025, 2493072000);  /* 2049 */

    /* Near the end of a century the window wraps forwards: in 2090, "05" is 2105. */
    time_t now_2090 = (time_t)days_from_civil(2090, 1, 1) * 86400;
    assert_parses("Monday, 01-Jan-05 00:00:00 GMT", now_2090,
                  (time_t)days_from_civil(2105, 1, 1) * 86400);
    assert_parses("Monday, 01-Jan-50 00:00:00 GMT", now_2090,
                  (time_t)days_from_civil(2050, 1, 1) * 86400);

    /* The day is checked against the year the rule picks: 29 Feb "00" is 2000 in 2025,
     * but 1900 in 1940 and 2100 in 2060, neither of which had one. */
    assert_parses("Tuesday, 29-Feb-00 00:00:00 GMT", NOW_2025, 951782400);
    assert_rejects("Tuesday, 29-Feb-00 00:00:00 GMT", (time_t)days_from_civil(1940, 1, 1) * 86400);
    assert_rejects("Tuesday, 29-Feb-00 00:00:00 GMT", (time_t)days_from_civil(2060, 1, 1) * 86400);
}

static void test_date_public_uses_clock(void **state)
{
    time_t t = 0;
    assert_true(um_http_date_parse(guard_cstr("Sunday, 06-Nov-94 08:49:37 GMT"), &t));
    assert_int_equal(t, 784111777);
    assert_true(um_http_date_parse(guard_cstr("Sun Nov  6 08:49:37 1994"), &t));
    assert_int_equal(t, 784111777);
}

static void test_date_malformed(void **state)
{
    static const char *const bad[] = {
        "",
        "   ",
        "Sun",
        "garbage that is not a date!!",
        /* IMF-fixdate: the names are case-sensitive (%s"..." in RFC 9110). */
        "sun, 06 Nov 1994 08:49:37 GMT",
        "Sun, 06 nov 1994 08:49:37 GMT",
        "Sun, 06 NOV 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:37 gmt",
        "Sun, 06 Nov 1994 08:49:37 UTC",
        "Sun, 06 Nov 1994 08:49:37 +0000",
        "Sun, 06 Nov 1994 08:49:37",
        "Sun, 06 Nov 1994 08:49:37 GMTX",
        "Sun, 06 Nov 1994 08:49:37 GMT x",
        "Sun, 6 Nov 1994 08:49:37 GMT",
        "Sun,  6 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 94 08:49:37 GMT",
        "Sun, 06 Nov 01994 08:49:37 GMT",
        "Sun, 06 Nov 1994 8:49:37 GMT",
        "Sun, 06 Nov 1994 08:49 GMT",
        "Sun, 06 Nov 1994 08-49-37 GMT",
        "Sun 06 Nov 1994 08:49:37 GMT",
        "Sun,06 Nov 1994 08:49:37 GMTT",
        "Sun, 06-Nov-1994 08:49:37 GMT",
        "Sun, 06 Nov 1994  08:49:37 GMT",
        "Sux, 06 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nox 1994 08:49:37 GMT",
        "Sun, +6 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:3a GMT",
        "Sun, 06 Nov 199\xd9 08:49:37 GMT",
        /* Out of range fields. */
        "Sun, 00 Nov 1994 08:49:37 GMT",
        "Sun, 31 Nov 1994 08:49:37 GMT",
        "Sun, 32 Jan 1994 08:49:37 GMT",
        "Sun, 30 Feb 2000 08:49:37 GMT",
        "Sun, 29 Feb 1900 08:49:37 GMT",
        "Sun, 29 Feb 2100 08:49:37 GMT",
        "Sun, 29 Feb 2023 08:49:37 GMT",
        "Sun, 06 Nov 1994 24:00:00 GMT",
        "Sun, 06 Nov 1994 08:60:37 GMT",
        "Sun, 06 Nov 1994 08:49:61 GMT",
        "Sun, 06 Nov 1994 99:99:99 GMT",
        "Sun, 06 Nov 0000 08:49:37 GMT",
        /* RFC 850. */
        "Sun, 06-Nov-94 08:49:37 GMT",
        "sunday, 06-Nov-94 08:49:37 GMT",
        "Sundae, 06-Nov-94 08:49:37 GMT",
        "Sunday, 06-Nov-1994 08:49:37 GMT",
        "Sunday, 06-Nov-94 08:49:37",
        "Sunday, 06-Nov-94 08:49:37 UTC",
        "Sunday, 06 Nov 94 08:49:37 GMT",
        "Sunday, 6-Nov-94 08:49:37 GMT",
        "Sunday, 31-Nov-94 08:49:37 GMT",
        "Sunday, 06-Nov-94 24:49:37 GMT",
        "Sunday,06-Nov-94 08:49:37 GMTXX",
        "Sundayday, 06-Nov-94 08:49:37 GMT",
        "Wednesda, 06-Nov-94 08:49:37 GMT",
        /* asctime. */
        "Sun Nov 6 08:49:37 1994",
        "Sun Nov  6 08:49:37 94",
        "Sun Nov  6 08:49:37 1994 GMT",
        "Sun Nov   6 08:49:37 1994",
        "Sun Nov 6  08:49:37 1994",
        "Sun Nov  0 08:49:37 1994",
        "Sun Nov 31 08:49:37 1994",
        "Sun nov  6 08:49:37 1994",
        "Sun Nov  6 08:49:37 0000",
        "Sun Nov  6 08:49:60 1994x",
        "Sun, Nov  6 08:49:37 1994",
    };
    for (size_t i = 0; i < UM_NELEMS(bad); i++)
        assert_rejects(bad[i], NOW_2025);

    /* A NUL anywhere is not a date either. */
    time_t t;
    assert_false(date_parse_at(guard("Sun, 06 Nov 1994 08:49:37 G\0T", 29), NOW_2025, &t));
    assert_false(date_parse_at(guard("Sun, 06 Nov 1994 08:49:37\0GMT", 29), NOW_2025, &t));
}

static void test_date_truncated(void **state)
{
    /* Every proper prefix of a valid date is invalid, and none is read past its end. */
    static const char *const good[] = {
        "Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT",
        "Wednesday, 09-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"};
    for (size_t i = 0; i < UM_NELEMS(good); i++) {
        time_t t;
        size_t n = strlen(good[i]);
        assert_true(date_parse_at(guard(good[i], n), NOW_2025, &t));
        for (size_t k = 0; k < n; k++) {
            t = 7;
            assert_false(date_parse_at(guard(good[i], k), NOW_2025, &t));
            assert_false(date_parse_at(guard(good[i] + n - k, k), NOW_2025, &t));
            assert_int_equal(t, 7);
        }
    }
}

/* ---- Range ---------------------------------------------------------------------------- */

struct range_case {
    const char *value;
    uint64_t size;
    int rc;
    uint64_t first, last;
};

static void check_ranges(const struct range_case *c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t first = 77, last = 77;
        int rc = um_range_parse(guard_cstr(c[i].value), c[i].size, &first, &last);
        if (rc != c[i].rc)
            fail_msg("\"%s\" size %llu: rc %d, want %d", c[i].value, (unsigned long long)c[i].size,
                     rc, c[i].rc);
        if (rc == UM_OK && (first != c[i].first || last != c[i].last))
            fail_msg("\"%s\" size %llu: [%llu, %llu], want [%llu, %llu]", c[i].value,
                     (unsigned long long)c[i].size, (unsigned long long)first,
                     (unsigned long long)last, (unsigned long long)c[i].first,
                     (unsigned long long)c[i].last);
    }
}

static void test_range_satisfiable(void **state)
{
    static const struct range_case cases[] = {
        {"bytes=0-499", 1000, UM_OK, 0, 499},
        {"bytes=500-999", 1000, UM_OK, 500, 999},
        {"bytes=0-999", 1000, UM_OK, 0, 999},
        {"bytes=0-0", 1000, UM_OK, 0, 0},
        {"bytes=999-999", 1000, UM_OK, 999, 999},
        {"bytes=5-5", 1000, UM_OK, 5, 5},
        /* last-pos past the end is clamped. */
        {"bytes=500-1000", 1000, UM_OK, 500, 999},
        {"bytes=500-1500", 1000, UM_OK, 500, 999},
        {"bytes=0-18446744073709551615", 1000, UM_OK, 0, 999},
        {"bytes=0-99999999999999999999999999", 1000, UM_OK, 0, 999},
        /* Open ranges. */
        {"bytes=0-", 1000, UM_OK, 0, 999},
        {"bytes=999-", 1000, UM_OK, 999, 999},
        {"bytes=000123-", 1000, UM_OK, 123, 999},
        /* Suffixes. */
        {"bytes=-1", 1000, UM_OK, 999, 999},
        {"bytes=-500", 1000, UM_OK, 500, 999},
        {"bytes=-999", 1000, UM_OK, 1, 999},
        {"bytes=-1000", 1000, UM_OK, 0, 999},
        {"bytes=-1001", 1000, UM_OK, 0, 999},
        {"bytes=-99999999999999999999999999", 1000, UM_OK, 0, 999},
        /* Size 1. */
        {"bytes=0-0", 1, UM_OK, 0, 0},
        {"bytes=0-", 1, UM_OK, 0, 0},
        {"bytes=-1", 1, UM_OK, 0, 0},
        {"bytes=-2", 1, UM_OK, 0, 0},
        {"bytes=0-5", 1, UM_OK, 0, 0},
        /* The largest size. */
        {"bytes=0-", UINT64_MAX, UM_OK, 0, UINT64_MAX - 1},
        {"bytes=18446744073709551614-", UINT64_MAX, UM_OK, UINT64_MAX - 1, UINT64_MAX - 1},
        {"bytes=-1", UINT64_MAX, UM_OK, UINT64_MAX - 1, UINT64_MAX - 1},
        /* The unit is case-insensitive. */
        {"BYTES=0-1", 10, UM_OK, 0, 1},
        {"Bytes=0-1", 10, UM_OK, 0, 1},
        {"bYtEs=-3", 10, UM_OK, 7, 9},
        /* OWS around the field value is not part of it. */
        {" bytes=0-1", 10, UM_OK, 0, 1},
        {"bytes=0-1 \t", 10, UM_OK, 0, 1},
        /* Empty list elements are ignored (RFC 9110 section 5.6.1.2), with OWS around
         * the commas. */
        {"bytes=,0-1", 10, UM_OK, 0, 1},
        {"bytes=, 0-1", 10, UM_OK, 0, 1},
        {"bytes=0-1,", 10, UM_OK, 0, 1},
        {"bytes=0-1 ,", 10, UM_OK, 0, 1},
        {"bytes=0-1\t, ,\t,", 10, UM_OK, 0, 1},
        {"bytes=,,,-2,,", 10, UM_OK, 8, 9},
    };
    check_ranges(cases, UM_NELEMS(cases));
}

static void test_range_unsatisfiable(void **state)
{
    static const struct range_case cases[] = {
        {"bytes=1000-", 1000, UM_ERR, 0, 0},
        {"bytes=1000-1000", 1000, UM_ERR, 0, 0},
        {"bytes=1000-2000", 1000, UM_ERR, 0, 0},
        {"bytes=1-", 1, UM_ERR, 0, 0},
        {"bytes=18446744073709551615-", 1000, UM_ERR, 0, 0},
        {"bytes=99999999999999999999999999-", 1000, UM_ERR, 0, 0},
        {"bytes=99999999999999999999999999-99999999999999999999999999", 1000, UM_ERR, 0, 0},
        {"bytes=18446744073709551615-", UINT64_MAX, UM_ERR, 0, 0},
        /* A zero-length suffix selects nothing. */
        {"bytes=-0", 1000, UM_ERR, 0, 0},
        {"bytes=-000", 1000, UM_ERR, 0, 0},
        /* Nothing is satisfiable in an empty representation. */
        {"bytes=0-0", 0, UM_ERR, 0, 0},
        {"bytes=0-", 0, UM_ERR, 0, 0},
        {"bytes=0-100", 0, UM_ERR, 0, 0},
        {"bytes=-1", 0, UM_ERR, 0, 0},
        {"bytes=-0", 0, UM_ERR, 0, 0},
    };
    check_ranges(cases, UM_NELEMS(cases));
}

static void test_range_ignored(void **state)
{
    static const struct range_case cases[] = {
        /* Not a byte range. */
        {"", 1000, UM_DONE, 0, 0},
        {"   ", 1000, UM_DONE, 0, 0},
        {"=", 1000, UM_DONE, 0, 0},
        {"=0-1", 1000, UM_DONE, 0, 0},
        {"bytes", 1000, UM_DONE, 0, 0},
        {"bytes 0-1", 1000, UM_DONE, 0, 0},
        {"items=0-1", 1000, UM_DONE, 0, 0},
        {"byte=0-1", 1000, UM_DONE, 0, 0},
        {"bytess=0-1", 1000, UM_DONE, 0, 0},
        {"none", 1000, UM_DONE, 0, 0},
        /* No OWS around '=' or inside a range. */
        {"bytes =0-1", 1000, UM_DONE, 0, 0},
        {"bytes= 0-1", 1000, UM_DONE, 0, 0},
        {"bytes=\t0-1", 1000, UM_DONE, 0, 0},
        {"bytes=0 -1", 1000, UM_DONE, 0, 0},
        {"bytes=0- 1", 1000, UM_DONE, 0, 0},
        {"bytes=- 1", 1000, UM_DONE, 0, 0},
        /* Bad syntax. */
        {"bytes=", 1000, UM_DONE, 0, 0},
        {"bytes=,", 1000, UM_DONE, 0, 0},
        {"bytes=, ,", 1000, UM_DONE, 0, 0},
        {"bytes=-", 1000, UM_DONE, 0, 0},
        {"bytes=--1", 1000, UM_DONE, 0, 0},
        {"bytes=1", 1000, UM_DONE, 0, 0},
        {"bytes=a-b", 1000, UM_DONE, 0, 0},
        {"bytes=0-b", 1000, UM_DONE, 0, 0},
        {"bytes=0-1-2", 1000, UM_DONE, 0, 0},
        {"bytes=+1-2", 1000, UM_DONE, 0, 0},
        {"bytes=1-+2", 1000, UM_DONE, 0, 0},
        {"bytes=-+2", 1000, UM_DONE, 0, 0},
        {"bytes=0x1-2", 1000, UM_DONE, 0, 0},
        {"bytes=1.5-2", 1000, UM_DONE, 0, 0},
        {"bytes=0-1;", 1000, UM_DONE, 0, 0},
        {"bytes=0-1=", 1000, UM_DONE, 0, 0},
        {"bytes==0-1", 1000, UM_DONE, 0, 0},
        {"bytes=-1-", 1000, UM_DONE, 0, 0},
        {"bytes=-1-2", 1000, UM_DONE, 0, 0},
        {"bytes=\xd9-1", 1000, UM_DONE, 0, 0},
        /* first > last is invalid, hence ignored, even where nothing would be satisfiable. */
        {"bytes=5-4", 1000, UM_DONE, 0, 0},
        {"bytes=1-0", 1000, UM_DONE, 0, 0},
        {"bytes=2000-1000", 1000, UM_DONE, 0, 0},
        {"bytes=99999999999999999999999999-5", 1000, UM_DONE, 0, 0},
        {"bytes=5-4", 0, UM_DONE, 0, 0},
        /* Several ranges: the whole representation. */
        {"bytes=0-1,2-3", 1000, UM_DONE, 0, 0},
        {"bytes=0-1, 2-3", 1000, UM_DONE, 0, 0},
        {"bytes=0-1,0-1", 1000, UM_DONE, 0, 0},
        {"bytes=0-1,-1", 1000, UM_DONE, 0, 0},
        {"bytes=0-1, , 5-", 1000, UM_DONE, 0, 0},
        {"bytes=2000-,3000-", 1000, UM_DONE, 0, 0},
        {"bytes=0-1,junk", 1000, UM_DONE, 0, 0},
    };
    check_ranges(cases, UM_NELEMS(cases));

    uint64_t f, l;
    assert_int_equal(um_range_parse(guard("bytes=0-1\0", 10), 100, &f, &l), UM_DONE);
    assert_int_equal(um_range_parse(guard("bytes\0=0-1", 10), 100, &f, &l), UM_DONE);
    assert_int_equal(um_range_parse((um_str){NULL, 0}, 100, &f, &l), UM_DONE);
}

static void test_range_every_boundary(void **state)
{
    /* All first/last pairs for small sizes against a direct statement of the rules. */
    for (uint64_t size = 0; size <= 6; size++) {
        for (uint64_t a = 0; a <= 8; a++) {
            char s[64];
            uint64_t f, l;
            snprintf(s, sizeof(s), "bytes=%llu-", (unsigned long long)a);
            int rc = um_range_parse(guard_cstr(s), size, &f, &l);
            if (a >= size) {
                assert_int_equal(rc, UM_ERR);
            } else {
                assert_int_equal(rc, UM_OK);
                assert_int_equal(f, a);
                assert_int_equal(l, size - 1);
            }

            snprintf(s, sizeof(s), "bytes=-%llu", (unsigned long long)a);
            rc = um_range_parse(guard_cstr(s), size, &f, &l);
            if (a == 0 || size == 0) {
                assert_int_equal(rc, UM_ERR);
            } else {
                assert_int_equal(rc, UM_OK);
                assert_int_equal(f, a >= size ? 0 : size - a);
                assert_int_equal(l, size - 1);
            }

            for (uint64_t b = 0; b <= 8; b++) {
                snprintf(s, sizeof(s), "bytes=%llu-%llu", (unsigned long long)a,
                         (unsigned long long)b);
                rc = um_range_parse(guard_cstr(s), size, &f, &l);
                if (a > b) {
                    assert_int_equal(rc, UM_DONE);
                } else if (a >= size) {
                    assert_int_equal(rc, UM_ERR);
                } else {
                    assert_int_equal(rc, UM_OK);
                    assert_int_equal(f, a);
                    assert_int_equal(l, b < size ? b : size - 1);
                }
            }
        }
    }
}

static void test_range_truncated(void **state)
{
    /* Prefixes of a valid header: never read past the end. */
    static const char v[] = "bytes=123-456";
    for (size_t k = 0; k <= sizeof(v) - 1; k++) {
        uint64_t f, l;
        int rc = um_range_parse(guard(v, k), 1000, &f, &l);
        if (k == 10 || k == 13) { /* "bytes=123-", "bytes=123-456" */
            assert_int_equal(rc, UM_OK);
            assert_int_equal(f, 123);
            assert_int_equal(l, k == 10 ? 999 : 456);
        } else { /* incomplete, or "bytes=123-4": first > last */
            assert_int_equal(rc, UM_DONE);
        }
    }
}

/* ---- entity tags ---------------------------------------------------------------------- */

static bool weak(const char *list, const char *etag)
{
    return um_etag_match_weak(guard_cstr(list), guard_cstr(etag));
}

static bool strong(const char *list, const char *etag)
{
    return um_etag_match_strong(guard_cstr(list), guard_cstr(etag));
}

static void test_etag_weak(void **state)
{
    assert_true(weak("\"abc\"", "\"abc\""));
    assert_true(weak("W/\"abc\"", "\"abc\""));
    assert_true(weak("\"abc\"", "W/\"abc\""));
    assert_true(weak("W/\"abc\"", "W/\"abc\""));
    assert_true(weak("\"\"", "\"\""));
    assert_false(weak("\"abc\"", "\"abd\""));
    assert_false(weak("\"abc\"", "\"ab\""));
    assert_false(weak("\"ab\"", "\"abc\""));
    assert_false(weak("\"ABC\"", "\"abc\"")); /* opaque tags compare byte for byte */
    assert_false(weak("\"\"", "\"a\""));
    /* obs-text is allowed in a tag. */
    assert_true(weak("\"caf\xc3\xa9\"", "\"caf\xc3\xa9\""));
    /* Surrounding OWS of the field value. */
    assert_true(weak("  \"abc\"\t", "\"abc\""));
    assert_true(weak("\"abc\"", " \"abc\" "));
}

static void test_etag_star(void **state)
{
    assert_true(weak("*", "\"abc\""));
    assert_true(weak("*", "W/\"abc\""));
    assert_true(weak(" * ", "\"abc\""));
    assert_true(strong("*", "\"abc\""));
    assert_true(strong("*", "W/\"abc\""));
    /* "*" matches any current representation, with or without a tag. */
    assert_true(weak("*", ""));
    /* "*" is the whole field or nothing. */
    assert_false(weak("*, \"abc\"", "\"abc\""));
    assert_false(weak("\"abc\", *", "\"abc\""));
    assert_false(weak("**", "\"abc\""));
    assert_false(weak("W/*", "\"abc\""));
    assert_false(weak("\"*\"", "\"abc\""));
    assert_true(weak("\"*\"", "\"*\"")); /* a tag whose content is a star */
}

static void test_etag_lists(void **state)
{
    assert_true(weak("\"a\", \"b\", \"abc\"", "\"abc\""));
    assert_true(weak("\"abc\", \"a\", \"b\"", "\"abc\""));
    assert_true(weak("\"a\",\"abc\"", "\"abc\""));
    assert_true(weak("\"a\" ,\t\"abc\"", "\"abc\""));
    assert_true(weak("\"a\"  ,  W/\"abc\"  ,  \"b\"", "\"abc\""));
    assert_false(weak("\"a\", \"b\", \"c\"", "\"abc\""));
    /* Empty list elements are skipped. */
    assert_true(weak(", \"abc\",", "\"abc\""));
    assert_true(weak("\"a\",, ,\t,\"abc\"", "\"abc\""));
    assert_false(weak(",,", "\"abc\""));
    /* A comma is a valid etagc: the list is walked, not split. */
    assert_true(weak("\"a,b\"", "\"a,b\""));
    assert_false(weak("\"a,b\"", "\"a\""));
    assert_false(weak("\"a,b\"", "\"b\""));
    assert_true(weak("\"x\", \"a,b\"", "\"a,b\""));
}

static void test_etag_malformed(void **state)
{
    static const char *const bad[] = {
        "",
        "abc",
        "\"abc",
        "abc\"",
        "\"abc\"x",
        "\"abc\" \"abc\"",
        "\"abc\"\"abc\"",
        "w/\"abc\"",
        "W\"abc\"",
        "W/ \"abc\"",
        "W/abc",
        "\"a bc\"",
        "\"a\tbc\"",
        "\"a\177bc\"",
        "\"a\001bc\"",
        "\"abc\", junk",
        "junk, \"abc\"",
        "\"abc\", \"",
        "\"abc\";",
        "\"abc\" ; \"abc\"",
        "W/",
        "W",
        "\"",
    };
    /* A malformed list matches nothing, even when it contains the tag. */
    for (size_t i = 0; i < UM_NELEMS(bad); i++) {
        if (weak(bad[i], "\"abc\"")) fail_msg("weak match with malformed list '%s'", bad[i]);
        if (strong(bad[i], "\"abc\"")) fail_msg("strong match with malformed list '%s'", bad[i]);
    }
    /* A NUL is not an etagc. */
    assert_false(um_etag_match_weak(guard("\"a\0c\"", 5), guard("\"a\0c\"", 5)));
    /* Our own tag malformed or absent: no match except "*". */
    assert_false(weak("\"abc\"", "abc"));
    assert_false(weak("\"abc\"", ""));
    assert_false(weak("\"abc\"", "\"abc\", \"abc\""));
    assert_false(weak("abc", "abc"));
    assert_false(strong("\"abc\"", "W\"abc\""));
    assert_false(um_etag_match_weak((um_str){NULL, 0}, guard_cstr("\"abc\"")));
    assert_false(um_etag_match_weak(guard_cstr("\"abc\""), (um_str){NULL, 0}));
}

static void test_etag_strong(void **state)
{
    assert_true(strong("\"abc\"", "\"abc\""));
    assert_false(strong("W/\"abc\"", "\"abc\""));
    assert_false(strong("\"abc\"", "W/\"abc\""));
    assert_false(strong("W/\"abc\"", "W/\"abc\""));
    assert_false(strong("\"abc\"", "\"abd\""));
    assert_true(strong("W/\"abc\", \"abc\"", "\"abc\""));
    assert_true(strong("\"x\", \"abc\"", "\"abc\""));
    assert_false(strong("\"x\", W/\"abc\"", "\"abc\""));
}

static void test_etag_truncated(void **state)
{
    /* Every proper prefix of a list, as the list and as our tag: no over-read, and only
     * the prefixes that are still complete lists can match. */
    static const char list[] = "W/\"a\", \"b,c\" ,\"abc\"";
    for (size_t k = 0; k < sizeof(list) - 1; k++) {
        bool m = um_etag_match_weak(guard(list, k), guard_cstr("\"abc\""));
        assert_false(m);
        m = um_etag_match_weak(guard(list, k), guard_cstr("\"a\""));
        /* "W/\"a\"" (k == 5) and every complete-element prefix after it match "a". */
        assert_int_equal(m, k == 5 || k == 6 || k == 7 || k == 12 || k == 13 || k == 14);
    }
    static const char tag[] = "W/\"abc\"";
    for (size_t k = 0; k < sizeof(tag) - 1; k++)
        assert_false(um_etag_match_weak(guard_cstr("\"abc\", W/\"abc\""), guard(tag, k)));
}

/* um_http_cls against the RFC definitions of its classes, byte by byte. */
static void test_char_classes(void **state)
{
    (void)state;
    for (int c = 0; c < 256; c++) {
        bool alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
        bool digit = c >= '0' && c <= '9';
        bool vchar = c >= 0x21 && c <= 0x7e;
        bool obs_text = c >= 0x80;
        bool tchar = alpha || digit || (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
        bool value = vchar || obs_text || c == ' ' || c == '\t';
        bool target = vchar && c != '#';
        bool unreserved = alpha || digit || (c != 0 && strchr("-._~", c) != NULL);
        bool sub_delim = c != 0 && strchr("!$&'()*+,;=", c) != NULL;
        bool auth = unreserved || sub_delim || (c != 0 && strchr("%:[]", c) != NULL);
        bool qdtext = c == '\t' || c == ' ' || c == 0x21 || (c >= 0x23 && c <= 0x5b) ||
                      (c >= 0x5d && c <= 0x7e) || obs_text;
        uint8_t want = (uint8_t)((tchar ? UM_HTTP_C_TCHAR : 0) | (value ? UM_HTTP_C_VALUE : 0) |
                                 (target ? UM_HTTP_C_TARGET : 0) | (auth ? UM_HTTP_C_AUTH : 0) |
                                 (qdtext ? UM_HTTP_C_QDTEXT : 0));
        if (um_http_cls[c] != want)
            fail_msg("byte 0x%02x: classes 0x%02x, expected 0x%02x", c, um_http_cls[c], want);
        assert_int_equal(um_http_tchar((unsigned char)c), tchar);
    }
    assert_int_equal(um_http_cls['\r'] | um_http_cls['\n'] | um_http_cls[0], 0);
}

/* ---- known field names and Connection's members -------------------------------------- */

static void test_field_id_known(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        enum um_field_id id;
    } known[] = {
        {"te", UM_FIELD_TE},
        {"age", UM_FIELD_AGE},
        {"via", UM_FIELD_VIA},
        {"date", UM_FIELD_DATE},
        {"etag", UM_FIELD_ETAG},
        {"vary", UM_FIELD_VARY},
        {"xkey", UM_FIELD_XKEY},
        {"host", UM_FIELD_HOST},
        {"server", UM_FIELD_SERVER},
        {"expect", UM_FIELD_EXPECT},
        {"pragma", UM_FIELD_PRAGMA},
        {"x-host", UM_FIELD_X_HOST},
        {"expires", UM_FIELD_EXPIRES},
        {"trailer", UM_FIELD_TRAILER},
        {"upgrade", UM_FIELD_UPGRADE},
        {"cache-tag", UM_FIELD_CACHE_TAG},
        {"connection", UM_FIELD_CONNECTION},
        {"keep-alive", UM_FIELD_KEEP_ALIVE},
        {"set-cookie", UM_FIELD_SET_COOKIE},
        {"cache-status", UM_FIELD_CACHE_STATUS},
        {"cache-control", UM_FIELD_CACHE_CONTROL},
        {"last-modified", UM_FIELD_LAST_MODIFIED},
        {"authorization", UM_FIELD_AUTHORIZATION},
        {"surrogate-key", UM_FIELD_SURROGATE_KEY},
        {"x-rewrite-url", UM_FIELD_X_REWRITE_URL},
        {"content-length", UM_FIELD_CONTENT_LENGTH},
        {"x-original-url", UM_FIELD_X_ORIGINAL_URL},
        {"x-forwarded-for", UM_FIELD_X_FORWARDED_FOR},
        {"x-original-host", UM_FIELD_X_ORIGINAL_HOST},
        {"content-encoding", UM_FIELD_CONTENT_ENCODING},
        {"proxy-connection", UM_FIELD_PROXY_CONNECTION},
        {"x-forwarded-host", UM_FIELD_X_FORWARDED_HOST},
        {"x-forwarded-port", UM_FIELD_X_FORWARDED_PORT},
        {"transfer-encoding", UM_FIELD_TRANSFER_ENCODING},
        {"x-forwarded-proto", UM_FIELD_X_FORWARDED_PROTO},
        {"proxy-authenticate", UM_FIELD_PROXY_AUTHENTICATE},
        {"x-forwarded-scheme", UM_FIELD_X_FORWARDED_SCHEME},
        {"x-forwarded-prefix", UM_FIELD_X_FORWARDED_PREFIX},
        {"x-forwarded-server", UM_FIELD_X_FORWARDED_SERVER},
        {"proxy-authorization", UM_FIELD_PROXY_AUTHORIZATION},
        {"proxy-authentication-info", UM_FIELD_PROXY_AUTHENTICATION_INFO},
    };
    for (size_t i = 0; i < UM_NELEMS(known); i++) {
        char up[32], mixed[32];
        size_t n = strlen(known[i].name);
        for (size_t k = 0; k <= n; k++) {
            char c = known[i].name[k];
            up[k] = c >= 'a' && c <= 'z' ? (char)(c - 32) : c;
            mixed[k] = k % 2 ? up[k] : c;
        }
        const char *spellings[] = {known[i].name, up, mixed};
        for (size_t s = 0; s < UM_NELEMS(spellings); s++) {
            /* Right before a guard page: the whole name is read, and no more. */
            enum um_field_id id = um_http_field_id(guard_cstr(spellings[s]));
            if (id != known[i].id)
                fail_msg("%s: id %d, expected %d", spellings[s], (int)id, (int)known[i].id);
        }
    }
}

static void test_field_id_other(void **state)
{
    (void)state;
    const char *other[] = {
        "",          "t",          "tf",         "ag",         "ages",      "agE ",
        " age",      "aga",        "bge",        "dates",      "etags",     "connectio",
        "connectiom", "xonnection", "connection:", "keep_alive", "set-cookie2",
        "content-lengtH2",        "content-lenght", "contentlength", "x-forwarded-fox",
        "proxy-authorizatio",     "proxy-authentication-inf0", "cache-controls",
        "x-powered-by", "Content-Type", "\xc3\xa1ge",
    };
    for (size_t i = 0; i < UM_NELEMS(other); i++)
        if (um_http_field_id(guard_cstr(other[i])) != UM_FIELD_OTHER)
            fail_msg("%s classified as known", other[i]);
    /* A NUL inside the name is a byte like another: "A\0E" is not "age". */
    assert_int_equal(um_http_field_id(guard("a\0e", 3)), UM_FIELD_OTHER);
    assert_int_equal(um_http_field_id((um_str){NULL, 0}), UM_FIELD_OTHER);
}

static um_str S(const char *s)
{
    return (um_str){s, strlen(s)};
}

static void conn_hdrs(struct um_header *h, const char *const *kv, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h[i].name = (um_str){kv[2 * i], strlen(kv[2 * i])};
        h[i].value = (um_str){kv[2 * i + 1], strlen(kv[2 * i + 1])};
    }
}

static void test_conn_tokens(void **state)
{
    (void)state;
    const char *kv[] = {"X-Before", "1", "connection", "  close ,\tX-Hop,, ,X-Other\t",
                        "Content-Type", "text/plain", "CONNECTION", "x-third", "Connection", ""};
    struct um_header h[5];
    conn_hdrs(h, kv, 5);
    struct um_http_conn_tokens t;
    um_http_conn_tokens_init(&t, h, 5);
    assert_false(t.overflow);
    assert_int_equal(t.n, 4);
    const char *named[] = {"close", "CLOSE", "x-hop", "X-HOP", "x-other", "X-Third", "x-THIRD"};
    for (size_t i = 0; i < UM_NELEMS(named); i++)
        if (!um_http_conn_names(&t, S(named[i])))
            fail_msg("%s not named", named[i]);
    const char *not_named[] = {"X-Before", "Content-Type", "x-ho", "x-hops", "X Hop", " X-Hop",
                               "Connection", ""};
    for (size_t i = 0; i < UM_NELEMS(not_named); i++)
        if (um_http_conn_names(&t, S(not_named[i])))
            fail_msg("%s named", not_named[i]);

    /* No Connection line: nothing is named. */
    um_http_conn_tokens_init(&t, h, 1);
    assert_int_equal(t.n, 0);
    assert_false(um_http_conn_names(&t, S("X-Before")));
    um_http_conn_tokens_init(&t, NULL, 0);
    assert_false(um_http_conn_names(&t, S("close")));
}

static void test_conn_tokens_overflow(void **state)
{
    (void)state;
    /* More members than the set holds: lookups scan the lines, and still find them all. */
    char list[UM_HTTP_CONN_TOKENS * 3 * 8];
    size_t o = 0;
    for (int i = 0; i < UM_HTTP_CONN_TOKENS * 3; i++)
        o += (size_t)snprintf(list + o, sizeof(list) - o, "%sx-%d ", i ? ", " : "", i);
    const char *kv[] = {"Connection", list, "Connection", " Last-One "};
    struct um_header h[2];
    conn_hdrs(h, kv, 2);
    struct um_http_conn_tokens t;
    um_http_conn_tokens_init(&t, h, 2);
    assert_true(t.overflow);
    char name[16];
    for (int i = 0; i < UM_HTTP_CONN_TOKENS * 3; i++) {
        snprintf(name, sizeof(name), "X-%d", i);
        if (!um_http_conn_names(&t, S(name)))
            fail_msg("%s not named", name);
    }
    assert_true(um_http_conn_names(&t, S("last-one")));
    assert_false(um_http_conn_names(&t, S("x-1000")));
    assert_false(um_http_conn_names(&t, S("")));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_char_classes),
        cmocka_unit_test(test_date_format_known),
        cmocka_unit_test(test_date_format_clamps),
        cmocka_unit_test(test_date_roundtrip_wide),
        cmocka_unit_test(test_date_roundtrip_days),
        cmocka_unit_test(test_date_three_formats),
        cmocka_unit_test(test_date_whitespace_around),
        cmocka_unit_test(test_date_weekday_not_checked),
        cmocka_unit_test(test_date_leap_second),
        cmocka_unit_test(test_date_rfc850_century),
        cmocka_unit_test(test_date_public_uses_clock),
        cmocka_unit_test(test_date_malformed),
        cmocka_unit_test(test_date_truncated),
        cmocka_unit_test(test_range_satisfiable),
        cmocka_unit_test(test_range_unsatisfiable),
        cmocka_unit_test(test_range_ignored),
        cmocka_unit_test(test_range_every_boundary),
        cmocka_unit_test(test_range_truncated),
        cmocka_unit_test(test_etag_weak),
        cmocka_unit_test(test_etag_star),
        cmocka_unit_test(test_etag_lists),
        cmocka_unit_test(test_etag_malformed),
        cmocka_unit_test(test_etag_strong),
        cmocka_unit_test(test_etag_truncated),
        cmocka_unit_test(test_list_next),
        cmocka_unit_test(test_field_id_known),
        cmocka_unit_test(test_field_id_other),
        cmocka_unit_test(test_conn_tokens),
        cmocka_unit_test(test_conn_tokens_overflow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
