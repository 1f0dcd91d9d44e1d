/* Unit tests for src/static/path.c: request path to a path below a static root.
 *
 * The traversal cases are the point: every spelling of ".." that a client or a decoding
 * layer can produce must be refused, and what is accepted must never be able to climb. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "umbra/static.h"

/* Copies s so that it ends right before a PROT_NONE page: a parser that reads one byte
 * past the end crashes instead of passing (picohttpparser's trick). */
static char *guard_map;
static size_t guard_data;

static um_str guard(const char *s, size_t len)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    if (guard_map == NULL || len > guard_data) {
        if (guard_map != NULL) munmap(guard_map, guard_data + pg);
        guard_data = len == 0 ? pg : (len + pg - 1) / pg * pg;
        guard_map =
            mmap(NULL, guard_data + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        assert_true(guard_map != MAP_FAILED);
        assert_int_equal(mprotect(guard_map + guard_data, pg, PROT_NONE), 0);
    }
    char *p = guard_map + guard_data - len;
    if (len > 0) memcpy(p, s, len);
    return (um_str){p, len};
}

#define OUTSZ 4096

static int norm(const char *raw, size_t len, char *out, size_t *outlen, unsigned *flags)
{
    return um_path_normalize(guard(raw, len), out, OUTSZ, outlen, flags);
}

static void check_ok(const char *raw, size_t rawlen, const char *want, size_t wantlen,
                     unsigned want_flags)
{
    char out[OUTSZ];
    size_t outlen = 999;
    unsigned flags = 999;
    int rc = norm(raw, rawlen, out, &outlen, &flags);
    if (rc != UM_OK) fail_msg("refused \"%.*s\", want \"%s\"", (int)rawlen, raw, want);
    if (outlen != wantlen || memcmp(out, want, wantlen) != 0 || out[outlen] != '\0')
        fail_msg("\"%.*s\" -> \"%.*s\", want \"%s\"", (int)rawlen, raw, (int)outlen, out, want);
    if (flags != want_flags)
        fail_msg("\"%.*s\": flags %u, want %u", (int)rawlen, raw, flags, want_flags);
}

#define OK(raw, want, fl) check_ok(raw, sizeof(raw) - 1, want, sizeof(want) - 1, fl)
#define DIR UM_PATH_F_DIR

static void check_err(const char *raw, size_t rawlen)
{
    char out[OUTSZ];
    size_t outlen = 999;
    unsigned flags = 999;
    memset(out, 'x', sizeof(out));
    int rc = norm(raw, rawlen, out, &outlen, &flags);
    if (rc != UM_ERR) fail_msg("accepted \"%.*s\" as \"%.*s\"", (int)rawlen, raw, (int)outlen, out);
    assert_int_equal(out[0], '\0'); /* never a half-built path */
}

#define ERR(raw) check_err(raw, sizeof(raw) - 1)

static void test_plain(void **state)
{
    OK("a/b.txt", "a/b.txt", 0);
    OK("/a/b.txt", "a/b.txt", 0);
    OK("index.html", "index.html", 0);
    OK("a/b/c/d/e", "a/b/c/d/e", 0);
    /* Bytes >= 0x80 (UTF-8 names) and printable ASCII other than '\\' pass. */
    OK("caf\xc3\xa9.txt", "caf\xc3\xa9.txt", 0);
    OK("a b", "a b", 0);
    OK("~user/$x&y=z;w!'()*+,:@", "~user/$x&y=z;w!'()*+,:@", 0);
    /* Dots that are not a whole "." or ".." segment are ordinary names. */
    OK("...", "...", 0);
    OK("..../x", "..../x", 0);
    OK("..a", "..a", 0);
    OK("a..", "a..", 0);
    OK("a/..b/c..", "a/..b/c..", 0);
    OK(".hidden", ".hidden", 0);
    OK(".well-known/x", ".well-known/x", 0);
}

static void test_root_and_dir_flag(void **state)
{
    OK("", "", DIR);
    OK("/", "", DIR);
    OK("//", "", DIR);
    OK("./", "", DIR);
    OK("/./", "", DIR);
    OK("a/", "a", DIR);
    OK("/a/b/", "a/b", DIR);
    OK("a//", "a", DIR);
    OK("a/./", "a", DIR);
    /* Only a trailing '/' in the raw path sets the flag: a final "." segment names the
     * same directory but is not one (browsers remove dot segments before sending). */
    OK("a/.", "a", 0);
    OK(".", "", 0);
    OK("%2e", "", 0);
    OK("a/%2e", "a", 0);
}

static void test_collapse(void **state)
{
    OK("//a///b//c", "a/b/c", 0);
    OK("//a///b//", "a/b", DIR);
    OK("./a/./b/.", "a/b", 0);
    OK("a/./././b", "a/b", 0);
    OK("/./a", "a", 0);
    OK(".//./a//.//", "a", DIR);
    /* "." also when encoded: %2e is '.' (RFC 3986 section 2.3). */
    OK("a/%2e/b", "a/b", 0);
    OK("a/%2E/b", "a/b", 0);
}

static void test_percent_decoding(void **state)
{
    OK("%41%62c", "Abc", 0);
    OK("%4a%4A%4b", "JJK", 0);
    OK("%20", " ", 0);
    OK("a%20b/c%25d", "a b/c%d", 0);
    OK("%e2%82%ac", "\xe2\x82\xac", 0);
    OK("%E2%82%AC", "\xe2\x82\xac", 0);
    OK("%7e", "~", 0);
    OK("%3f%23", "?#", 0);
    /* Decoded once only: "%252e%252e" is a file literally named "%2e%2e", which cannot
     * climb. Same for a double-encoded slash or backslash. */
    OK("%252e%252e", "%2e%2e", 0);
    OK("%252e%252e/%252e%252e/etc/passwd", "%2e%2e/%2e%2e/etc/passwd", 0);
    OK("..%252f..%252fetc", "..%2f..%2fetc", 0);
    OK("%255c", "%5c", 0);
    OK("%2525", "%25", 0);
    /* Overlong UTF-8 for '.' and '/' (%c0%ae, %c0%af) are just bytes: a name, not a dot. */
    OK("%c0%ae%c0%ae", "\xc0\xae\xc0\xae", 0);
    OK("%c0%ae%c0%ae/%c0%afetc", "\xc0\xae\xc0\xae/\xc0\xaf\x65tc", 0);
    OK("%e0%80%ae%e0%80%ae", "\xe0\x80\xae\xe0\x80\xae", 0);
    OK("\xc0\xae\xc0\xae", "\xc0\xae\xc0\xae", 0);
}

static void test_traversal(void **state)
{
    ERR("..");
    ERR("/..");
    ERR("../");
    ERR("/../");
    ERR("../etc/passwd");
    ERR("/../etc/passwd");
    ERR("a/../../etc/passwd");
    ERR("a/..");
    ERR("a/../");
    ERR("a/../b"); /* harmless, but ".." is refused wherever it is */
    ERR("./..");
    ERR(".//..//");
    ERR("a/b/c/../../../..");
    /* Encoded dots, every case. */
    ERR("%2e%2e");
    ERR("%2E%2E");
    ERR("%2e%2E");
    ERR("%2E%2e");
    ERR(".%2e");
    ERR(".%2E");
    ERR("%2e.");
    ERR("%2E.");
    ERR("%2e%2e/");
    ERR("/%2e%2e/etc/passwd");
    ERR("a/%2e%2e/%2e%2e/etc");
    ERR("a/.%2e/b");
    /* Encoded slash: refused on its own, so ".." cannot hide beside it. */
    ERR("..%2f");
    ERR("..%2F");
    ERR("..%2fetc%2fpasswd");
    ERR("%2e%2e%2f");
    ERR("%2e%2e%2fetc");
    ERR("%2f");
    ERR("%2F");
    ERR("a%2fb");
    ERR("%2fetc/passwd");
    ERR("a/b%2F");
    /* Backslash, raw or encoded (a separator elsewhere). */
    ERR("\\");
    ERR("..\\");
    ERR("..\\etc");
    ERR("a\\b");
    ERR("%5c");
    ERR("%5C");
    ERR("..%5c");
    ERR("..%5cwindows%5cwin.ini");
    ERR("%2e%2e%5c");
    ERR("%2e%2e\\");
}

static void test_control_bytes(void **state)
{
    ERR("%00");
    ERR("a%00.txt");
    ERR("a.php%00.txt");
    check_err("a\0b", 3);
    check_err("\0", 1);
    check_err("a/\0", 3);
    ERR("\x01");
    ERR("a\tb");
    ERR("a\nb");
    ERR("a\rb");
    ERR("%0a");
    ERR("%0D%0A");
    ERR("%1f");
    ERR("%1F");
    ERR("\x1f");
    ERR("%7f");
    ERR("%7F");
    ERR("\x7f");
}

static void test_bad_escapes(void **state)
{
    ERR("%");
    ERR("a%");
    ERR("a/%");
    ERR("%2");
    ERR("a%2");
    ERR("%%");
    ERR("%%41");
    ERR("a%%41");
    ERR("%g1");
    ERR("%1g");
    ERR("%G0");
    ERR("%-1");
    ERR("% 1");
    ERR("%+1");
    ERR("%x41");
    ERR("%2/");
    ERR("%/2");
    ERR("a%2/b");
    ERR("100%");
    ERR("%\xc3\xa9");
}

static void test_every_byte(void **state)
{
    /* Each byte raw and encoded in both cases of hex, as a whole segment "x<b>y". */
    for (unsigned c = 0; c < 256; c++) {
        bool refused = c < 0x20 || c == 0x7f || c == '\\';
        char raw[3] = {'x', (char)c, 'y'};
        char want[3] = {'x', (char)c, 'y'};
        if (c == '/') {
            check_ok(raw, 3, "x/y", 3, 0);
        } else if (c == '%') {
            check_err(raw, 3);
        } else if (refused) {
            check_err(raw, 3);
        } else {
            check_ok(raw, 3, want, 3, 0);
        }

        for (int upper = 0; upper < 2; upper++) {
            char enc[6];
            snprintf(enc, sizeof(enc), upper ? "x%%%02Xy" : "x%%%02xy", c);
            if (refused || c == '/')
                check_err(enc, 5);
            else
                check_ok(enc, 5, want, 3, 0);
        }
    }
}

static void test_segment_length(void **state)
{
    /* Segment length is not the normaliser's business: a name over NAME_MAX is left to
     * the file system, which does not find it (404, not 400). */
    char raw[3 * 300 + 8], want[300];

    memset(raw, 'a', 300);
    memset(want, 'a', 300);
    check_ok(raw, 300, want, 300, 0);

    /* Decoded bytes are what is written. */
    for (int i = 0; i < 256; i++)
        memcpy(raw + 3 * i, "%41", 3);
    memset(want, 'A', 256);
    check_ok(raw, 3 * 256, want, 256, 0);
}

static void test_output_size(void **state)
{
    char out[64];
    size_t outlen;
    unsigned flags;
    um_str abc = guard("/abc/", 5);

    /* "abc" needs 4 bytes with the NUL. */
    assert_int_equal(um_path_normalize(abc, out, 4, &outlen, &flags), UM_OK);
    assert_string_equal(out, "abc");
    assert_int_equal(outlen, 3);
    assert_int_equal(flags, DIR);
    assert_int_equal(um_path_normalize(abc, out, 3, &outlen, &flags), UM_ERR);
    assert_int_equal(um_path_normalize(abc, out, 1, &outlen, &flags), UM_ERR);
    assert_int_equal(out[0], '\0');
    assert_int_equal(um_path_normalize(abc, out, 0, &outlen, &flags), UM_ERR);

    /* The root fits in one byte; dropped segments take no room. */
    um_str root = guard("/./", 3);
    assert_int_equal(um_path_normalize(root, out, 1, &outlen, &flags), UM_OK);
    assert_int_equal(outlen, 0);
    assert_string_equal(out, "");

    /* Regression (found by fuzz_path): trailing "." segments need no room of their own. */
    um_str dots = guard("/a/./.", 6);
    assert_int_equal(um_path_normalize(dots, out, 2, &outlen, &flags), UM_OK);
    assert_string_equal(out, "a");

    /* The separator counts: "ab/cd" is 5 + NUL. */
    um_str two = guard("ab//cd", 6);
    assert_int_equal(um_path_normalize(two, out, 6, &outlen, &flags), UM_OK);
    assert_string_equal(out, "ab/cd");
    assert_int_equal(um_path_normalize(two, out, 5, &outlen, &flags), UM_ERR);
    um_str enc = guard("%41%42/%43%44", 13);
    assert_int_equal(um_path_normalize(enc, out, 6, &outlen, &flags), UM_OK);
    assert_string_equal(out, "AB/CD");
    assert_int_equal(um_path_normalize(enc, out, 5, &outlen, &flags), UM_ERR);

    /* A long path of many short segments. */
    char big[8192];
    for (size_t i = 0; i < sizeof(big); i += 2) {
        big[i] = 'a';
        big[i + 1] = '/';
    }
    char bigout[8192];
    assert_int_equal(
        um_path_normalize(guard(big, sizeof(big)), bigout, sizeof(bigout), &outlen, &flags), UM_OK);
    assert_int_equal(outlen, sizeof(big) - 1);
    assert_int_equal(flags, DIR);
    assert_int_equal(
        um_path_normalize(guard(big, sizeof(big)), bigout, sizeof(bigout) - 1, &outlen, &flags),
        UM_ERR);
}

/* One prefix of a path and what it must give: want NULL for a refusal. */
struct prefix_case {
    size_t len;
    const char *want;
    unsigned flags;
};

static void check_prefixes(const char *raw, const struct prefix_case *cases, size_t n)
{
    assert_int_equal(n, strlen(raw) + 1); /* every prefix, the empty one and raw included */
    for (size_t k = 0; k < n; k++) {
        assert_int_equal(cases[k].len, k);
        if (cases[k].want == NULL)
            check_err(raw, k);
        else
            check_ok(raw, k, cases[k].want, strlen(cases[k].want), cases[k].flags);
    }
}

static void test_truncated_escapes(void **state)
{
    /* Every prefix of an encoded path, placed right before the guard page: a prefix that
     * cuts an escape short is refused, one that ends between escapes is normalised like
     * any other path, and no prefix is read past its end (the guard page would fault). */
    static const struct prefix_case clean[] = {
        {0, "", DIR},    {1, NULL, 0},  {2, NULL, 0},  {3, "A", 0},      {4, "Ab", 0},
        {5, "Ab", DIR},  {6, NULL, 0},  {7, NULL, 0},  {8, "Ab", 0},     {9, "Ab", DIR},
        {10, "Ab/c", 0}, {11, NULL, 0}, {12, NULL, 0}, {13, "Ab/c~", 0},
    };
    check_prefixes("%41b/%2e/c%7e", clean, UM_NELEMS(clean));

    /* Dots spelt with escapes: "%2e" alone is ".", dropped; "%2e%2e" is "..", refused,
     * and so is every longer prefix (an escape cut short, then an encoded '/'). */
    static const struct prefix_case climbing[] = {
        {0, "", DIR},  {1, NULL, 0},  {2, NULL, 0},  {3, "", 0},    {4, NULL, 0},  {5, NULL, 0},
        {6, NULL, 0},  {7, NULL, 0},  {8, NULL, 0},  {9, NULL, 0},  {10, NULL, 0}, {11, NULL, 0},
        {12, NULL, 0}, {13, NULL, 0}, {14, NULL, 0}, {15, NULL, 0}, {16, NULL, 0},
    };
    check_prefixes("%2e%2e%2f%41/b%2", climbing, UM_NELEMS(climbing));
}

/* A small deterministic generator for the property test. */
static uint64_t rng = 0x9e3779b97f4a7c15u;

static unsigned next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng >> 32);
}

static bool has_segment(const char *s, size_t len, const char *seg)
{
    size_t n = strlen(seg);
    for (size_t i = 0; i + n <= len; i++) {
        if ((i == 0 || s[i - 1] == '/') && memcmp(s + i, seg, n) == 0 &&
            (i + n == len || s[i + n] == '/'))
            return true;
    }
    return false;
}

static void test_random_paths_cannot_climb(void **state)
{
    /* Strings built from the pieces of traversal attempts. Whatever is accepted must be a
     * clean relative path: no "." or ".." segment, no empty segment, no leading or
     * trailing '/', no '\\', no control byte. And whatever contains a ".." segment once
     * decoded must be refused. */
    static const char *const pieces[] = {".",   "..",  "/",   "%2e", "%2E", "%2f", "%2F",
                                         "%5c", "\\",  "%00", "%25", "a",   "%",   "2",
                                         "e",   "%c0", "%ae", "//",  "./",  "../"};
    unsigned accepted = 0;
    for (int iter = 0; iter < 200000; iter++) {
        char raw[64];
        size_t len = 0;
        unsigned n = next_rand() % 8;
        for (unsigned i = 0; i < n; i++) {
            const char *p = pieces[next_rand() % UM_NELEMS(pieces)];
            size_t pl = strlen(p);
            memcpy(raw + len, p, pl);
            len += pl;
        }
        char out[OUTSZ];
        size_t outlen;
        unsigned flags;
        int rc = um_path_normalize(guard(raw, len), out, sizeof(out), &outlen, &flags);
        if (rc != UM_OK) continue;
        accepted++;
        assert_int_equal(strlen(out), outlen);
        if (outlen > 0) {
            assert_true(out[0] != '/');
            assert_true(out[outlen - 1] != '/');
        }
        assert_null(strstr(out, "//"));
        assert_false(has_segment(out, outlen, ".."));
        assert_false(has_segment(out, outlen, "."));
        for (size_t i = 0; i < outlen; i++) {
            unsigned char c = (unsigned char)out[i];
            assert_true(c >= 0x20 && c != 0x7f && c != '\\');
        }
        /* No raw ".." segment was let through either. */
        assert_false(has_segment(raw, len, ".."));
        assert_int_equal(flags, len == 0 || raw[len - 1] == '/' ? DIR : 0);
    }
    /* The generator must exercise both outcomes to prove anything. */
    assert_true(accepted > 10000 && accepted < 190000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain),
        cmocka_unit_test(test_root_and_dir_flag),
        cmocka_unit_test(test_collapse),
        cmocka_unit_test(test_percent_decoding),
        cmocka_unit_test(test_traversal),
        cmocka_unit_test(test_control_bytes),
        cmocka_unit_test(test_bad_escapes),
        cmocka_unit_test(test_every_byte),
        cmocka_unit_test(test_segment_length),
        cmocka_unit_test(test_output_size),
        cmocka_unit_test(test_truncated_escapes),
        cmocka_unit_test(test_random_paths_cannot_climb),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
