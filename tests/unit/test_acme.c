/* The ACME client's pure parts (src/tls/acme_jws.c, acme_http.c's JSON readers,
 * acme_settings.c's durations): base64url, the JWK thumbprint against RFC 7638's own
 * example, ES256 JWS and CSR checked with OpenSSL, the atomic file. */
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

#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "tls/acme.h"
#include "umbra/base64.h"

static char *b64(const void *p, size_t n)
{
    struct um_buf b;
    um_buf_init(&b);
    um_base64_append(&b, p, n, true);
    um_buf_append_str(&b, "");
    return um_buf_detach(&b);
}

/* base64url decoding for the checks (no padding). */
static size_t unb64(const char *s, size_t n, unsigned char *out)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    unsigned v = 0, bits = 0;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p = strchr(abc, s[i]);
        assert_non_null(p);
        v = v << 6 | (unsigned)(p - abc);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (unsigned char)(v >> bits);
        }
    }
    return o;
}

static void test_b64url(void **state)
{
    (void)state;
    const struct {
        const char *in, *out;
    } v[] = {{"", ""}, {"f", "Zg"}, {"fo", "Zm8"}, {"foo", "Zm9v"}, {"foob", "Zm9vYg"},
             {"\xfb\xff", "-_8"}};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        char *s = b64(v[i].in, strlen(v[i].in));
        assert_string_equal(s ? s : "", v[i].out);
        free(s);
    }
}

/* RFC 7638 section 3.1: the example RSA key's members in lexical order, and its
 * thumbprint. */
static void test_thumbprint_rfc7638(void **state)
{
    (void)state;
    const char *jwk =
        "{\"e\":\"AQAB\",\"kty\":\"RSA\",\"n\":\"0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78"
        "LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n"
        "9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6"
        "qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw"
        "0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw\"}";
    struct um_buf b;
    um_buf_init(&b);
    um__acme_thumbprint(jwk, strlen(jwk), &b);
    assert_string_equal(b.base, "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs");
    um_buf_dispose(&b);
}

/* A member's string value in JSON text, through the client's own reader. */
static char *member(const char *json, const char *key)
{
    return um__acme_jstr(json, strlen(json), key);
}

static void test_jwk_and_jws_verify(void **state)
{
    (void)state;
    EVP_PKEY *key = um__acme_key_new();
    assert_non_null(key);
    struct um_buf jwk, jws;
    um_buf_init(&jwk);
    um_buf_init(&jws);
    assert_true(um__acme_jwk(key, &jwk));
    assert_true(strncmp(jwk.base, "{\"crv\":\"P-256\",\"kty\":\"EC\",\"x\":\"", 31) == 0);
    char *x = member(jwk.base, "x"), *y = member(jwk.base, "y");
    assert_int_equal(strlen(x), 43);
    assert_int_equal(strlen(y), 43);

    const char *prot = "{\"alg\":\"ES256\",\"nonce\":\"n1\",\"url\":\"https://ca/x\"}";
    assert_true(um__acme_jws(key, prot, "{\"a\":1}", &jws));
    char *p = member(jws.base, "protected"), *pl = member(jws.base, "payload"),
         *sig = member(jws.base, "signature");
    unsigned char buf[512], raw[64];
    size_t n = unb64(p, strlen(p), buf);
    assert_int_equal(n, strlen(prot));
    assert_memory_equal(buf, prot, n);
    n = unb64(pl, strlen(pl), buf);
    assert_memory_equal(buf, "{\"a\":1}", n);
    assert_int_equal(unb64(sig, strlen(sig), raw), 64);

    /* r || s back to DER, verified over "protected.payload". */
    ECDSA_SIG *es = ECDSA_SIG_new();
    ECDSA_SIG_set0(es, BN_bin2bn(raw, 32, NULL), BN_bin2bn(raw + 32, 32, NULL));
    unsigned char *der = NULL;
    int dl = i2d_ECDSA_SIG(es, &der);
    char input[512];
    snprintf(input, sizeof input, "%s.%s", p, pl);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    assert_int_equal(EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, key), 1);
    assert_int_equal(EVP_DigestVerify(md, der, (size_t)dl, (unsigned char *)input,
                                      strlen(input)), 1);
    /* One changed byte of the signed input fails. */
    input[3] ^= 1;
    assert_int_equal(EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, key), 1);
    assert_int_not_equal(EVP_DigestVerify(md, der, (size_t)dl, (unsigned char *)input,
                                          strlen(input)), 1);
    EVP_MD_CTX_free(md);
    OPENSSL_free(der);
    ECDSA_SIG_free(es);
    free(x), free(y), free(p), free(pl), free(sig);
    um_buf_dispose(&jwk);
    um_buf_dispose(&jws);
    EVP_PKEY_free(key);
}

static void test_csr(void **state)
{
    (void)state;
    EVP_PKEY *key = um__acme_key_new();
    char *names[] = {"a.example", "b.example"};
    struct um_buf b;
    um_buf_init(&b);
    assert_true(um__acme_csr(key, names, 2, &b));
    unsigned char der[4096];
    size_t n = unb64(b.base, b.len, der);
    const unsigned char *p = der;
    X509_REQ *req = d2i_X509_REQ(NULL, &p, (long)n);
    assert_non_null(req);
    assert_int_equal(X509_REQ_verify(req, key), 1);
    STACK_OF(X509_EXTENSION) *exts = X509_REQ_get_extensions(req);
    GENERAL_NAMES *san = NULL;
    for (int i = 0; i < sk_X509_EXTENSION_num(exts) && san == NULL; i++)
        san = X509V3_EXT_d2i(sk_X509_EXTENSION_value(exts, i));
    assert_non_null(san);
    assert_int_equal(sk_GENERAL_NAME_num(san), 2);
    for (int i = 0; i < 2; i++) {
        GENERAL_NAME *g = sk_GENERAL_NAME_value(san, i);
        assert_int_equal(g->type, GEN_DNS);
        assert_string_equal((const char *)ASN1_STRING_get0_data(g->d.dNSName), names[i]);
    }
    GENERAL_NAMES_free(san);
    sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
    X509_REQ_free(req);
    um_buf_dispose(&b);
    EVP_PKEY_free(key);
}

/* RFC 8737 section 3: the name as the only SAN, the critical acmeIdentifier extension
 * holding the DER OCTET STRING of SHA-256(key authorization). */
static void test_tls_alpn_certificate(void **state)
{
    (void)state;
    X509 *x = NULL;
    EVP_PKEY *k = NULL;
    const char *ka = "token.thumbprint";
    assert_true(um__acme_alpn_cert("a.example", ka, &x, &k));
    assert_int_equal(X509_check_private_key(x, k), 1);
    assert_int_equal(X509_check_host(x, "a.example", 0, 0, NULL), 1);
    ASN1_OBJECT *oid = OBJ_txt2obj("1.3.6.1.5.5.7.1.31", 1);
    int at = X509_get_ext_by_OBJ(x, oid, -1);
    assert_true(at >= 0);
    X509_EXTENSION *ext = X509_get_ext(x, at);
    assert_int_equal(X509_EXTENSION_get_critical(ext), 1);
    const ASN1_OCTET_STRING *v = X509_EXTENSION_get_data(ext);
    unsigned char md[32];
    EVP_Digest(ka, strlen(ka), md, NULL, EVP_sha256(), NULL);
    assert_int_equal(ASN1_STRING_length(v), 34);
    const unsigned char *d = ASN1_STRING_get0_data(v);
    assert_int_equal(d[0], 0x04); /* OCTET STRING */
    assert_int_equal(d[1], 32);
    assert_memory_equal(d + 2, md, 32);
    ASN1_OBJECT_free(oid);
    X509_free(x);
    EVP_PKEY_free(k);
}

/* RFC 9773 section 4.1's example: AKI 69:88:5B:...:D4 and serial 00:87:65:43:21. */
static void test_ari_cert_id(void **state)
{
    (void)state;
    const unsigned char aki[] = {0x69, 0x88, 0x5B, 0x6B, 0x87, 0x46, 0x40, 0x41, 0xE1, 0xB3,
                                 0x7B, 0x84, 0x7B, 0xA0, 0xAE, 0x2C, 0xDE, 0x01, 0xC8, 0xD4};
    const unsigned char serial[] = {0x00, 0x87, 0x65, 0x43, 0x21};
    struct um_buf b;
    um_buf_init(&b);
    um__acme_cert_id_of(aki, sizeof aki, serial, sizeof serial, &b);
    assert_string_equal(b.base, "aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE");
    um_buf_dispose(&b);
}

static void test_rfc3339(void **state)
{
    (void)state;
    double t = 0;
    assert_true(um__acme_parse_time("1970-01-01T00:00:00Z", &t) && t == 0);
    assert_true(um__acme_parse_time("2025-01-02T04:00:00Z", &t) && t == 1735790400.0);
    assert_true(um__acme_parse_time("2025-01-02T04:00:00.123456Z", &t) && t == 1735790400.0);
    assert_true(um__acme_parse_time("2025-01-02T05:30:00+01:30", &t) && t == 1735790400.0);
    assert_true(um__acme_parse_time("2025-01-02T02:00:00-02:00", &t) && t == 1735790400.0);
    const char *bad[] = {"", "2025-01-02", "2025-01-02T04:00:00", "2025-01-02T04:00:00Zx",
                         "2025-01-02 04:00:00Z", "2025-01-02T04:00:00+0100"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_false(um__acme_parse_time(bad[i], &t));
}

static void test_json_readers(void **state)
{
    (void)state;
    const char *order = "{ \"status\": \"pending\", \"expires\": \"2026-01-01T00:00:00Z\",\n"
                        "  \"identifiers\": [{\"type\":\"dns\",\"value\":\"a\\u002eb\"}],\n"
                        "  \"authorizations\": [ \"https://ca/a/1\", \"https://ca/a/2\" ],\n"
                        "  \"finalize\": \"https://ca/f\", \"n\": 12 }";
    char *s = member(order, "status");
    assert_string_equal(s, "pending");
    free(s);
    s = member(order, "finalize");
    assert_string_equal(s, "https://ca/f");
    free(s);
    assert_null(member(order, "certificate"));
    assert_null(member(order, "n")); /* not a string */
    const char *as, *items[4];
    size_t an, lens[4];
    assert_true(um__acme_jspan(order, strlen(order), "authorizations", &as, &an));
    assert_int_equal(um__acme_jarray(as, an, items, lens, 4), 2);
    assert_int_equal(lens[1], strlen("\"https://ca/a/2\""));
    assert_memory_equal(items[1], "\"https://ca/a/2\"", lens[1]);
    assert_true(um__acme_jspan(order, strlen(order), "identifiers", &as, &an));
    assert_int_equal(um__acme_jarray(as, an, items, lens, 4), 1);
    s = um__acme_jstr(items[0], lens[0], "value");
    assert_string_equal(s, "a.b");
    free(s);

    char out[256];
    const char *prob = "{\"type\":\"urn:ietf:params:acme:error:badNonce\",\"detail\":\"JWS has "
                       "an invalid anti-replay nonce\",\"status\":400}";
    um__acme_problem(prob, strlen(prob), out, sizeof out);
    assert_string_equal(out,
                        "urn:ietf:params:acme:error:badNonce: JWS has an invalid anti-replay nonce");
    um__acme_problem("oops", 4, out, sizeof out);
    assert_string_equal(out, "oops");
}

static void test_durations(void **state)
{
    (void)state;
    double d = 0;
    assert_true(um_tls_parse_duration("30d", &d));
    assert_true(d == 30 * 86400.0);
    assert_true(um_tls_parse_duration("12h", &d) && d == 12 * 3600.0);
    assert_true(um_tls_parse_duration("90m", &d) && d == 5400.0);
    assert_true(um_tls_parse_duration("45s", &d) && d == 45.0);
    assert_true(um_tls_parse_duration("600", &d) && d == 600.0);
    const char *bad[] = {"", "d", "0d", "30x", "30dd", "-1d", "1.5d", " 3d", "99999999999d"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_false(um_tls_parse_duration(bad[i], &d));
}

static void test_write_file_atomic_0600(void **state)
{
    (void)state;
    char dir[] = "/tmp/umbra-acme-unit-XXXXXX", path[256];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/f.key", dir);
    assert_true(um__acme_write_file(path, "one", 3));
    assert_true(um__acme_write_file(path, "second", 6));
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(st.st_size, 6);
    char err[256];
    EVP_PKEY *k = um__acme_key_load(path, err, sizeof err); /* not a key */
    assert_null(k);
    snprintf(path, sizeof path, "%s/account.key", dir);
    k = um__acme_key_load(path, err, sizeof err); /* made and stored */
    assert_non_null(k);
    EVP_PKEY *again = um__acme_key_load(path, err, sizeof err);
    assert_non_null(again);
    assert_int_equal(EVP_PKEY_eq(k, again), 1);
    EVP_PKEY_free(k);
    EVP_PKEY_free(again);
    unlink(path);
    snprintf(path, sizeof path, "%s/f.key", dir);
    unlink(path);
    assert_int_equal(rmdir(dir), 0); /* no temporary file left behind */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_b64url),
        cmocka_unit_test(test_thumbprint_rfc7638),
        cmocka_unit_test(test_jwk_and_jws_verify),
        cmocka_unit_test(test_csr),
        cmocka_unit_test(test_tls_alpn_certificate),
        cmocka_unit_test(test_ari_cert_id),
        cmocka_unit_test(test_rfc3339),
        cmocka_unit_test(test_json_readers),
        cmocka_unit_test(test_durations),
        cmocka_unit_test(test_write_file_atomic_0600),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
