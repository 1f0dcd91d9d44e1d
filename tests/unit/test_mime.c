/* Unit tests for src/static/mime.c: Content-Type by file extension.
 *
 * The .c is included to reach the built-in table and check that it is sorted, since the
 * lookup bisects it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "static/mime.c"

static const char *mime(const char *name)
{
    return um_mime_type((um_str){name, strlen(name)}, NULL, 0);
}

static void test_table_sorted(void **state)
{
    for (size_t i = 0; i < UM_NELEMS(types); i++) {
        const char *e = types[i].ext;
        size_t n = strlen(e);
        assert_true(n > 0 && n <= EXT_MAX);
        for (size_t k = 0; k < n; k++)
            assert_false(e[k] >= 'A' && e[k] <= 'Z');
        assert_non_null(strchr(types[i].type, '/'));
        if (i > 0 && strcmp(types[i - 1].ext, e) >= 0)
            fail_msg("table out of order at \"%s\", \"%s\"", types[i - 1].ext, e);
    }
}

static void test_every_entry_found(void **state)
{
    /* Each key, lower and upper case, as a bare name and below a directory. */
    for (size_t i = 0; i < UM_NELEMS(types); i++) {
        char name[64], upper[64];
        snprintf(name, sizeof(name), "dir/file.%s", types[i].ext);
        assert_ptr_equal(mime(name), types[i].type);
        size_t n = strlen(name);
        for (size_t k = 0; k <= n; k++)
            upper[k] = name[k] >= 'a' && name[k] <= 'z' ? (char)(name[k] - 32) : name[k];
        assert_ptr_equal(mime(upper), types[i].type);
    }
}

static void test_common_types(void **state)
{
    assert_string_equal(mime("index.html"), "text/html; charset=utf-8");
    assert_string_equal(mime("index.htm"), "text/html; charset=utf-8");
    assert_string_equal(mime("style.css"), "text/css; charset=utf-8");
    assert_string_equal(mime("app.js"), "text/javascript; charset=utf-8");
    assert_string_equal(mime("app.mjs"), "text/javascript; charset=utf-8");
    assert_string_equal(mime("data.json"), "application/json");
    assert_string_equal(mime("app.js.map"), "application/json");
    assert_string_equal(mime("readme.txt"), "text/plain; charset=utf-8");
    assert_string_equal(mime("README.md"), "text/markdown; charset=utf-8");
    assert_string_equal(mime("t.csv"), "text/csv; charset=utf-8");
    assert_string_equal(mime("feed.xml"), "application/xml");
    assert_string_equal(mime("logo.svg"), "image/svg+xml");
    assert_string_equal(mime("a.png"), "image/png");
    assert_string_equal(mime("a.jpg"), "image/jpeg");
    assert_string_equal(mime("a.jpeg"), "image/jpeg");
    assert_string_equal(mime("a.gif"), "image/gif");
    assert_string_equal(mime("a.webp"), "image/webp");
    assert_string_equal(mime("a.avif"), "image/avif");
    assert_string_equal(mime("favicon.ico"), "image/x-icon");
    assert_string_equal(mime("f.woff"), "font/woff");
    assert_string_equal(mime("f.woff2"), "font/woff2");
    assert_string_equal(mime("doc.pdf"), "application/pdf");
    assert_string_equal(mime("m.wasm"), "application/wasm");
    assert_string_equal(mime("v.mp4"), "video/mp4");
    assert_string_equal(mime("v.webm"), "video/webm");
    assert_string_equal(mime("s.mp3"), "audio/mpeg");
    assert_string_equal(mime("site.webmanifest"), "application/manifest+json");
    assert_string_equal(mime("c.yaml"), "application/yaml");
    assert_string_equal(mime("c.yml"), "application/yaml");
    assert_string_equal(mime("x.7z"), "application/x-7z-compressed");
    assert_string_equal(mime("x.zip"), "application/zip");
    assert_string_equal(mime("x.bin"), "application/octet-stream");
    /* The last extension counts. */
    assert_string_equal(mime("x.tar.gz"), "application/gzip");
    assert_string_equal(mime("x.tar"), "application/x-tar");
    assert_string_equal(mime("x.html.txt"), "text/plain; charset=utf-8");
}

static void test_case_insensitive(void **state)
{
    assert_string_equal(mime("INDEX.HTML"), "text/html; charset=utf-8");
    assert_string_equal(mime("a.Js"), "text/javascript; charset=utf-8");
    assert_string_equal(mime("a.wOfF2"), "font/woff2");
    assert_string_equal(mime("PHOTO.JPG"), "image/jpeg");
}

static void test_no_extension(void **state)
{
    static const char *const names[] = {
        "",         "README",      "Makefile",
        "dir/",     "file.",       "a/b.",
        ".bashrc",  "dir/.bashrc", ".",
        "..",       "a/.",         "a.b/c",
        "a.html/x", "a.html/",     "x.nope",
        "x.htm_",   "x.ht",        "x.h",
        "x.html5",  "x.HTMLX",     "x. html",
        "x.html ",  "x.-",         "x.\xc3\xa9",
        ".js",      "dir/.css",    "x.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    };
    for (size_t i = 0; i < UM_NELEMS(names); i++) {
        const char *t = mime(names[i]);
        if (strcmp(t, "application/octet-stream") != 0) fail_msg("\"%s\" -> %s", names[i], t);
    }
    /* A NUL ends nothing: "x.js\0" is not "x.js". */
    assert_string_equal(um_mime_type((um_str){"x.js\0", 5}, NULL, 0), "application/octet-stream");
    assert_string_equal(um_mime_type((um_str){"x.j\0s", 5}, NULL, 0), "application/octet-stream");
    assert_string_equal(um_mime_type((um_str){NULL, 0}, NULL, 0), "application/octet-stream");
}

static void test_dotfiles_with_extension(void **state)
{
    /* A leading dot starts a name; a later dot still starts an extension. */
    assert_string_equal(mime(".config.json"), "application/json");
    assert_string_equal(mime("dir/.eslintrc.yml"), "application/yaml");
    assert_string_equal(mime("..css"), "text/css; charset=utf-8");
}

static void test_overrides(void **state)
{
    struct um_mime_type ov[] = {
        {"wasm", "application/x-custom-wasm"},
        {"foo", "text/foo"},
        {"averyveryverylongextension", "application/x-long"},
        {"html", "text/html"},
    };
    size_t n = UM_NELEMS(ov);
    um_str name;

    name = UM_STR("m.wasm");
    assert_ptr_equal(um_mime_type(name, ov, n), ov[0].type);
    name = UM_STR("x.FOO");
    assert_ptr_equal(um_mime_type(name, ov, n), ov[1].type);
    name = UM_STR("x.averyveryverylongextension");
    assert_ptr_equal(um_mime_type(name, ov, n), ov[2].type);
    name = UM_STR("Index.HTML");
    assert_ptr_equal(um_mime_type(name, ov, n), ov[3].type);
    /* Not overridden: the built-in table. */
    name = UM_STR("a.css");
    assert_string_equal(um_mime_type(name, ov, n), "text/css; charset=utf-8");
    name = UM_STR("a.fooo");
    assert_string_equal(um_mime_type(name, ov, n), "application/octet-stream");
    /* An override needs an extension to apply to. */
    name = UM_STR("foo");
    assert_string_equal(um_mime_type(name, ov, n), "application/octet-stream");
    name = UM_STR(".foo");
    assert_string_equal(um_mime_type(name, ov, n), "application/octet-stream");
    /* Only the first n are searched. */
    name = UM_STR("x.foo");
    assert_string_equal(um_mime_type(name, ov, 1), "application/octet-stream");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_sorted), cmocka_unit_test(test_every_entry_found),
        cmocka_unit_test(test_common_types), cmocka_unit_test(test_case_insensitive),
        cmocka_unit_test(test_no_extension), cmocka_unit_test(test_dotfiles_with_extension),
        cmocka_unit_test(test_overrides),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
