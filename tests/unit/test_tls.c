/* Unit tests of the TLS module (src/tls/): certificate selection by SNI, protocol versions,
 * ALPN, session tickets, reloads, watching, the I/O helpers and the store's lifetime.
 *
 * Certificates (ECDSA P-256, self-signed) are made with the OpenSSL API in a temporary
 * directory, and configs are loaded with the real config loader. Each handshake runs in
 * process over a non-blocking socketpair: the server side through the module, the client
 * side through a plain OpenSSL client context, stepped in turn until both are done. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "umbra/config.h"
#include "umbra/module.h"
#include "umbra/log.h"
#include "umbra/tls.h"

static char tmpdir[] = "/tmp/umbra-test-tls-XXXXXX";
static char cfgpath[PATH_MAX];

static const char *in_tmp(const char *name)
{
    static char buf[4][PATH_MAX];
    static int next;
    char *b = buf[next++ % 4];
    snprintf(b, PATH_MAX, "%s/%s", tmpdir, name);
    return b;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

/* --- certificates ------------------------------------------------------------------------ */

/* A self-signed ECDSA P-256 certificate for subject CN cn with the DNS names in san
 * ("DNS:a.test,DNS:*.b.test"), valid from an hour ago for a day. */
static X509 *make_cert(EVP_PKEY *key, const char *cn, const char *san, long serial)
{
    X509 *x = X509_new();
    assert_non_null(x);
    assert_int_equal(X509_set_version(x, 2), 1);
    ASN1_INTEGER_set(X509_get_serialNumber(x), serial);
    X509_gmtime_adj(X509_getm_notBefore(x), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x), 86400);
    assert_int_equal(X509_set_pubkey(x, key), 1);
    X509_NAME *name = X509_get_subject_name(x);
    assert_int_equal(X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                                (const unsigned char *)cn, -1, -1, 0),
                     1);
    assert_int_equal(X509_set_issuer_name(x, name), 1);
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
    X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &v3, NID_subject_alt_name, san);
    assert_non_null(ext);
    assert_int_equal(X509_add_ext(x, ext, -1), 1);
    X509_EXTENSION_free(ext);
    assert_true(X509_sign(x, key, EVP_sha256()) > 0);
    return x;
}

static void write_cert(const char *file, X509 *x)
{
    FILE *f = fopen(file, "wb");
    assert_non_null(f);
    assert_int_equal(PEM_write_X509(f, x), 1);
    assert_int_equal(fclose(f), 0);
}

static void write_key(const char *file, EVP_PKEY *key)
{
    FILE *f = fopen(file, "wb");
    assert_non_null(f);
    assert_int_equal(PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL), 1);
    assert_int_equal(fclose(f), 0);
}

/* Milliseconds make_pair waits between writing the key and the certificate. */
static int pair_gap_ms;

/* Writes a new key and a certificate for it as NAME.key and NAME.crt. With replace, both
 * are written to temporary names and renamed over the old ones, as deployment tools do. */
static void make_pair(const char *name, const char *cn, const char *san, bool replace)
{
    static long serial = 1;
    char crt[64], key[64], tmp_crt[64], tmp_key[64];
    snprintf(crt, sizeof crt, "%s.crt", name);
    snprintf(key, sizeof key, "%s.key", name);
    snprintf(tmp_crt, sizeof tmp_crt, "%s.crt.new", name);
    snprintf(tmp_key, sizeof tmp_key, "%s.key.new", name);
    EVP_PKEY *k = EVP_EC_gen("P-256");
    assert_non_null(k);
    X509 *x = make_cert(k, cn, san, serial++);
    write_key(in_tmp(replace ? tmp_key : key), k);
    if (replace)
        assert_int_equal(rename(in_tmp(tmp_key), in_tmp(key)), 0);
    if (pair_gap_ms > 0)
        usleep((useconds_t)pair_gap_ms * 1000);
    write_cert(in_tmp(replace ? tmp_crt : crt), x);
    if (replace)
        assert_int_equal(rename(in_tmp(tmp_crt), in_tmp(crt)), 0);
    X509_free(x);
    EVP_PKEY_free(k);
}

/* Rewrites NAME.crt in place with a new certificate for the key in NAME.key. */
static void rewrite_cert(const char *name, const char *cn, const char *san)
{
    char crt[64], key[64];
    snprintf(crt, sizeof crt, "%s.crt", name);
    snprintf(key, sizeof key, "%s.key", name);
    FILE *f = fopen(in_tmp(key), "rb");
    assert_non_null(f);
    EVP_PKEY *k = PEM_read_PrivateKey(f, NULL, NULL, NULL);
    fclose(f);
    assert_non_null(k);
    X509 *x = make_cert(k, cn, san, 1000 + (long)time(NULL) % 1000);
    write_cert(in_tmp(crt), x);
    X509_free(x);
    EVP_PKEY_free(k);
}

/* The default pair files: a.test and *.b.test in "a", c.test in "c". */
static void reset_certs(void)
{
    make_pair("a", "a.test", "DNS:a.test,DNS:*.b.test", false);
    make_pair("c", "c.test", "DNS:c.test", false);
}

static int group_setup(void **state)
{
    if (mkdtemp(tmpdir) == NULL)
        return -1;
    snprintf(cfgpath, sizeof cfgpath, "%s/config.lua", tmpdir);
    um_log_level = UM_LOG_WARN;
    /* As the server does: a write to a closed socket is an error, not a signal. */
    signal(SIGPIPE, SIG_IGN);
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

static int test_setup(void **state)
{
    reset_certs();
    return 0;
}

/* --- stores and handshakes ---------------------------------------------------------------- */

/* Loads a config with entries a (first) and c, plus extra text inside tls = { ... }, and
 * builds its store. */
static struct um_tls *make_store(const char *extra)
{
    char text[2048], err[1024] = "";
    snprintf(text, sizeof text,
             "listen = { { '127.0.0.1:0', tls = true } }\n"
             "tls = {\n"
             "  { hosts = { 'a.test', '*.b.test' }, cert = 'a.crt', key = 'a.key' },\n"
             "  { hosts = { 'C.test' }, cert = 'c.crt', key = 'c.key' },\n"
             "  %s\n"
             "}\n"
             "routes = { { path = '/', root = '.' } }\n",
             extra != NULL ? extra : "");
    write_text(cfgpath, text);
    struct um_config *c = um_config_load(cfgpath, err, sizeof err);
    if (c == NULL)
        fail_msg("config: %s", err);
    struct um_tls *t = um_tls_create(c, err, sizeof err);
    if (t == NULL)
        fail_msg("store: %s", err);
    um_config_unref(c);
    return t;
}

/* A client context: versions min..max (0: any), ALPN list in wire format or NULL. */
static SSL_CTX *client_ctx(int min, int max, const char *alpn, size_t alpn_len)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    assert_non_null(ctx);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    if (min)
        SSL_CTX_set_min_proto_version(ctx, min);
    if (max)
        SSL_CTX_set_max_proto_version(ctx, max);
    if (alpn != NULL)
        assert_int_equal(SSL_CTX_set_alpn_protos(ctx, (const unsigned char *)alpn,
                                                 (unsigned)alpn_len),
                         0);
    return ctx;
}

struct conn {
    int fd[2];
    SSL *srv, *cli;
};

enum { HS_OK, HS_SERVER_FAILED, HS_CLIENT_FAILED, HS_STUCK };

/* Runs a handshake between the store's server side and a client of cctx sending sni (may
 * be NULL) and offering session sess (may be NULL). c is set up even when it fails. */
static bool hs_h1_only; /* the next handshakes' server SSL offers no h2 (http2 = false) */

static int handshake(struct um_tls *t, SSL_CTX *cctx, const char *sni, SSL_SESSION *sess,
                     struct conn *c)
{
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, c->fd) != 0)
        return HS_STUCK;
    c->srv = um_tls_accept_new(t, c->fd[0]);
    if (c->srv != NULL && hs_h1_only)
        um_tls_set_h1_only(c->srv);
    c->cli = SSL_new(cctx);
    if (c->srv == NULL || c->cli == NULL)
        return HS_STUCK;
    SSL_set_fd(c->cli, c->fd[1]);
    SSL_set_connect_state(c->cli);
    if (sni != NULL)
        SSL_set_tlsext_host_name(c->cli, sni);
    if (sess != NULL)
        SSL_set_session(c->cli, sess);
    bool sdone = false, cdone = false;
    for (int i = 0; i < 100 && !(sdone && cdone); i++) {
        if (!sdone) {
            int want = 0, r = um_tls_handshake(c->srv, &want);
            if (r == UM_ERR)
                return HS_SERVER_FAILED;
            if (r == UM_AGAIN && want != UM_TLS_WANT_READ && want != UM_TLS_WANT_WRITE)
                return HS_STUCK;
            sdone = r == UM_OK;
        }
        if (!cdone) {
            int r = SSL_do_handshake(c->cli);
            if (r == 1) {
                cdone = true;
            } else {
                int e = SSL_get_error(c->cli, r);
                if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
                    ERR_clear_error();
                    return HS_CLIENT_FAILED;
                }
            }
        }
    }
    return sdone && cdone ? HS_OK : HS_STUCK;
}

static void conn_close(struct conn *c)
{
    /* Without a close_notify sent, OpenSSL marks the client's session not resumable. */
    if (c->cli != NULL && SSL_is_init_finished(c->cli))
        SSL_shutdown(c->cli);
    ERR_clear_error();
    SSL_free(c->srv);
    SSL_free(c->cli);
    close(c->fd[0]);
    close(c->fd[1]);
    memset(c, 0, sizeof *c);
}

/* The server sends a few bytes and the client reads them, which also makes the client
 * take the TLS 1.3 session tickets that follow the handshake. */
static void exchange(struct conn *c)
{
    int want = 0;
    char buf[16];
    size_t n = 0;
    assert_int_equal(um_tls_write(c->srv, "ping", 4, &want), 4);
    for (int i = 0; i < 100 && n == 0; i++)
        if (SSL_read_ex(c->cli, buf, sizeof buf, &n) != 1) {
            assert_int_equal(SSL_get_error(c->cli, 0), SSL_ERROR_WANT_READ);
            n = 0;
        }
    assert_int_equal(n, 4);
    assert_memory_equal(buf, "ping", 4);
}

/* The common name of the certificate the client got. */
static const char *peer_cn(struct conn *c)
{
    static char cn[256];
    X509 *x = SSL_get0_peer_certificate(c->cli);
    assert_non_null(x);
    assert_true(X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn,
                                          sizeof cn) > 0);
    return cn;
}

/* Handshakes with sni and returns the common name of the certificate the client got. */
static const char *cn_for(struct um_tls *t, SSL_CTX *cctx, const char *sni)
{
    struct conn c;
    assert_int_equal(handshake(t, cctx, sni, NULL, &c), HS_OK);
    const char *cn = peer_cn(&c);
    if (sni != NULL)
        assert_string_equal(um_tls_server_name(c.srv), sni);
    else
        assert_null(um_tls_server_name(c.srv));
    conn_close(&c);
    return cn;
}

/* --- tests ----------------------------------------------------------------------------- */

static void test_sni_selection(void **state)
{
    struct um_tls *t = make_store(NULL);
    SSL_CTX *cctx = client_ctx(0, 0, NULL, 0);
    struct conn c;

    assert_string_equal(cn_for(t, cctx, "a.test"), "a.test");
    assert_string_equal(cn_for(t, cctx, "c.test"), "c.test");
    assert_string_equal(cn_for(t, cctx, "C.Test"), "c.test");
    assert_string_equal(cn_for(t, cctx, "c.test."), "c.test");
    /* The wildcard covers one label, and the certificate's SAN says so too. */
    assert_int_equal(handshake(t, cctx, "x.b.test", NULL, &c), HS_OK);
    assert_string_equal(peer_cn(&c), "a.test");
    assert_int_equal(X509_check_host(SSL_get0_peer_certificate(c.cli), "x.b.test", 0, 0, NULL),
                     1);
    conn_close(&c);
    /* Everything else gets the default: the first entry. */
    assert_string_equal(cn_for(t, cctx, "unknown.test"), "a.test");
    assert_string_equal(cn_for(t, cctx, NULL), "a.test");
    um_tls_destroy(t);

    /* With default = "c.test", names no entry lists and clients without SNI get c.test;
     * the wildcard does not match its bare parent or two labels. */
    um_log_level = UM_LOG_DEBUG; /* the "no certificate for" line */
    t = make_store("default = 'c.test'");
    assert_string_equal(cn_for(t, cctx, "a.test"), "a.test");
    assert_string_equal(cn_for(t, cctx, "www.B.test"), "a.test");
    assert_string_equal(cn_for(t, cctx, "unknown.test"), "c.test");
    assert_string_equal(cn_for(t, cctx, "b.test"), "c.test");
    assert_string_equal(cn_for(t, cctx, "y.x.b.test"), "c.test");
    assert_string_equal(cn_for(t, cctx, NULL), "c.test");
    um_log_level = UM_LOG_WARN;
    um_tls_destroy(t);
    SSL_CTX_free(cctx);
}

static void test_versions(void **state)
{
    struct um_tls *t = make_store(NULL);
    SSL_CTX *v12 = client_ctx(TLS1_2_VERSION, TLS1_2_VERSION, NULL, 0);
    SSL_CTX *v13 = client_ctx(TLS1_3_VERSION, TLS1_3_VERSION, NULL, 0);
    struct conn c;
    assert_int_equal(handshake(t, v12, "a.test", NULL, &c), HS_OK);
    assert_int_equal(SSL_version(c.srv), TLS1_2_VERSION);
    exchange(&c);
    conn_close(&c);
    assert_int_equal(handshake(t, v13, "c.test", NULL, &c), HS_OK);
    assert_int_equal(SSL_version(c.srv), TLS1_3_VERSION);
    assert_string_equal(peer_cn(&c), "c.test");
    exchange(&c);
    conn_close(&c);
    um_tls_destroy(t);

    /* protocols = { "TLSv1.3" } refuses a client that stops at TLS 1.2. */
    t = make_store("protocols = { 'TLSv1.3' }");
    assert_int_equal(handshake(t, v12, "a.test", NULL, &c), HS_SERVER_FAILED);
    assert_non_null(strstr(um_tls_error(c.srv), "protocol"));
    conn_close(&c);
    assert_int_equal(handshake(t, v13, "a.test", NULL, &c), HS_OK);
    conn_close(&c);
    um_tls_destroy(t);

    /* And { "TLSv1.2" } a client that starts at 1.3. */
    t = make_store("protocols = { 'TLSv1.2' }");
    assert_int_equal(handshake(t, v13, "a.test", NULL, &c), HS_SERVER_FAILED);
    conn_close(&c);
    assert_int_equal(handshake(t, v12, "a.test", NULL, &c), HS_OK);
    conn_close(&c);
    um_tls_destroy(t);
    SSL_CTX_free(v12);
    SSL_CTX_free(v13);
}

static void test_ciphers(void **state)
{
    /* The server's TLS 1.2 list decides. */
    struct um_tls *t = make_store("ciphers = 'ECDHE-ECDSA-CHACHA20-POLY1305'");
    SSL_CTX *v12 = client_ctx(TLS1_2_VERSION, TLS1_2_VERSION, NULL, 0);
    struct conn c;
    assert_int_equal(handshake(t, v12, "a.test", NULL, &c), HS_OK);
    assert_string_equal(SSL_CIPHER_get_name(SSL_get_current_cipher(c.srv)),
                        "ECDHE-ECDSA-CHACHA20-POLY1305");
    conn_close(&c);
    um_tls_destroy(t);
    SSL_CTX_free(v12);

    t = make_store("ciphersuites = 'TLS_CHACHA20_POLY1305_SHA256'");
    SSL_CTX *v13 = client_ctx(TLS1_3_VERSION, 0, NULL, 0);
    assert_int_equal(handshake(t, v13, "a.test", NULL, &c), HS_OK);
    assert_string_equal(SSL_CIPHER_get_name(SSL_get_current_cipher(c.srv)),
                        "TLS_CHACHA20_POLY1305_SHA256");
    conn_close(&c);
    um_tls_destroy(t);
    SSL_CTX_free(v13);

    char reason[256];
    assert_true(um_tls_check_ciphers("ECDHE+AESGCM:!aNULL:@SECLEVEL=2", false, reason,
                                     sizeof reason));
    assert_false(um_tls_check_ciphers("ECDHE-RSA-AES128-GCM-SHA265", false, reason,
                                      sizeof reason));
    assert_string_equal(reason,
                        "'ECDHE-RSA-AES128-GCM-SHA265' is not a known TLS 1.2 cipher or cipher "
                        "group");
    assert_true(um_tls_check_ciphers("TLS_AES_256_GCM_SHA384:TLS_AES_128_GCM_SHA256", true,
                                     reason, sizeof reason));
    assert_false(um_tls_check_ciphers("TLS_AES_128_GCM_SHA256:TLS_AES_999", true, reason,
                                      sizeof reason));
    assert_non_null(strstr(reason, "TLS_AES_999"));
}

static void test_alpn(void **state)
{
    struct um_tls *t = make_store(NULL);
    static const char both[] = "\x08http/1.1\x02h2", h2[] = "\x02h2", h1[] = "\x08http/1.1",
                      other[] = "\x06spdy/3";
    SSL_CTX *cboth = client_ctx(0, 0, both, sizeof both - 1);
    SSL_CTX *ch2 = client_ctx(0, 0, h2, sizeof h2 - 1);
    SSL_CTX *ch1 = client_ctx(0, 0, h1, sizeof h1 - 1);
    SSL_CTX *cother = client_ctx(0, 0, other, sizeof other - 1);
    SSL_CTX *cnone = client_ctx(0, 0, NULL, 0);
    struct conn c;
    const unsigned char *p;
    unsigned n;

    /* The server's preference wins: h2, whatever order the client lists them in. */
    assert_int_equal(handshake(t, cboth, "a.test", NULL, &c), HS_OK);
    um_str alpn = um_tls_alpn(c.srv);
    assert_int_equal(alpn.len, 2);
    assert_memory_equal(alpn.base, "h2", 2);
    SSL_get0_alpn_selected(c.cli, &p, &n);
    assert_int_equal(n, 2);
    assert_memory_equal(p, "h2", 2);
    conn_close(&c);

    assert_int_equal(handshake(t, ch2, "a.test", NULL, &c), HS_OK);
    assert_int_equal(um_tls_alpn(c.srv).len, 2);
    conn_close(&c);

    assert_int_equal(handshake(t, ch1, "a.test", NULL, &c), HS_OK);
    alpn = um_tls_alpn(c.srv);
    assert_int_equal(alpn.len, 8);
    assert_memory_equal(alpn.base, "http/1.1", 8);
    conn_close(&c);

    /* Only protocols the server does not speak: no_application_protocol (RFC 7301). */
    assert_int_equal(handshake(t, cother, "a.test", NULL, &c), HS_SERVER_FAILED);
    conn_close(&c);

    /* A listener with http2 = false: HTTP/1.1 only; h2 alone is refused. */
    hs_h1_only = true;
    assert_int_equal(handshake(t, cboth, "a.test", NULL, &c), HS_OK);
    alpn = um_tls_alpn(c.srv);
    assert_int_equal(alpn.len, 8);
    assert_memory_equal(alpn.base, "http/1.1", 8);
    conn_close(&c);
    assert_int_equal(handshake(t, ch2, "a.test", NULL, &c), HS_SERVER_FAILED);
    conn_close(&c);
    hs_h1_only = false;

    /* No ALPN at all: HTTP/1.1 is implied. */
    assert_int_equal(handshake(t, cnone, "a.test", NULL, &c), HS_OK);
    assert_int_equal(um_tls_alpn(c.srv).len, 0);
    conn_close(&c);

    um_tls_destroy(t);
    SSL_CTX_free(cboth);
    SSL_CTX_free(ch2);
    SSL_CTX_free(ch1);
    SSL_CTX_free(cother);
    SSL_CTX_free(cnone);
}

/* A handshake that yields a resumable session; the caller frees it. */
static SSL_SESSION *first_session(struct um_tls *t, SSL_CTX *cctx, const char *sni)
{
    struct conn c;
    assert_int_equal(handshake(t, cctx, sni, NULL, &c), HS_OK);
    assert_int_equal(SSL_session_reused(c.cli), 0);
    exchange(&c);
    SSL_SESSION *s = SSL_get1_session(c.cli);
    assert_non_null(s);
    assert_int_equal(SSL_SESSION_is_resumable(s), 1);
    conn_close(&c);
    return s;
}

/* Whether a handshake offering sess resumed it (both sides must agree). */
static bool resumes(struct um_tls *t, SSL_CTX *cctx, const char *sni, SSL_SESSION *sess)
{
    struct conn c;
    assert_int_equal(handshake(t, cctx, sni, sess, &c), HS_OK);
    bool reused = SSL_session_reused(c.cli);
    assert_int_equal(SSL_session_reused(c.srv), reused);
    exchange(&c);
    conn_close(&c);
    return reused;
}

static void test_resumption(void **state)
{
    struct um_tls *t = make_store(NULL);
    int versions[] = {TLS1_3_VERSION, TLS1_2_VERSION};
    for (size_t i = 0; i < 2; i++) {
        SSL_CTX *cctx = client_ctx(versions[i], versions[i], NULL, 0);
        SSL_SESSION *s = first_session(t, cctx, "a.test");
        assert_true(resumes(t, cctx, "a.test", s));
        SSL_SESSION_free(s);
        /* A ticket issued through the second entry's context resumes as well: the keys
         * belong to the store, whatever context the connection started on. */
        s = first_session(t, cctx, "c.test");
        assert_true(resumes(t, cctx, "c.test", s));
        SSL_SESSION_free(s);
        SSL_CTX_free(cctx);
    }
    um_tls_destroy(t);
}

static void test_ticket_rotation(void **state)
{
    struct um_tls *t = make_store(NULL);
    SSL_CTX *cctx = client_ctx(TLS1_2_VERSION, TLS1_2_VERSION, NULL, 0);

    /* After one rotation the previous key still decrypts; after two it is gone and the
     * client gets a full handshake. */
    SSL_SESSION *s = first_session(t, cctx, "a.test");
    um_tls_rotate_tickets(t);
    assert_true(resumes(t, cctx, "a.test", s));
    um_tls_rotate_tickets(t);
    assert_false(resumes(t, cctx, "a.test", s));
    SSL_SESSION_free(s);

    /* A new store (a config reload) can take over the keys. */
    s = first_session(t, cctx, "a.test");
    struct um_tls *t2 = make_store(NULL);
    assert_false(resumes(t2, cctx, "a.test", s));
    um_tls_inherit_tickets(t2, t);
    assert_true(resumes(t2, cctx, "a.test", s));
    SSL_SESSION_free(s);

    um_tls_destroy(t2);
    um_tls_destroy(t);
    SSL_CTX_free(cctx);
}

static void test_reload(void **state)
{
    struct um_tls *t = make_store(NULL);
    SSL_CTX *cctx = client_ctx(0, 0, NULL, 0);
    char err[1024];
    struct conn old;

    /* A connection made before the reload carries on with its certificate. */
    assert_int_equal(handshake(t, cctx, "a.test", NULL, &old), HS_OK);

    make_pair("a", "a2.test", "DNS:a.test,DNS:*.b.test", true);
    assert_int_equal(um_tls_reload(t, err, sizeof err), 2);
    assert_string_equal(err, "");
    assert_string_equal(cn_for(t, cctx, "a.test"), "a2.test");
    assert_string_equal(cn_for(t, cctx, "x.b.test"), "a2.test");
    assert_string_equal(cn_for(t, cctx, "c.test"), "c.test");
    assert_string_equal(peer_cn(&old), "a.test");
    exchange(&old);
    conn_close(&old);

    /* A broken replacement keeps the certificate loaded before. */
    write_text(in_tmp("a.crt"), "garbage\n");
    assert_int_equal(um_tls_reload(t, err, sizeof err), 1);
    char want[PATH_MAX + 64];
    snprintf(want, sizeof want, "%s: no PEM certificate in the file", in_tmp("a.crt"));
    assert_string_equal(err, want);
    assert_string_equal(cn_for(t, cctx, "a.test"), "a2.test");

    /* A key that is not the certificate's: the same. */
    make_pair("a", "a3.test", "DNS:a.test", false);
    make_pair("x", "x.test", "DNS:x.test", false);
    assert_int_equal(rename(in_tmp("x.key"), in_tmp("a.key")), 0);
    assert_int_equal(um_tls_reload(t, err, sizeof err), 1);
    snprintf(want, sizeof want, "%s: the key does not match the certificate", in_tmp("a.key"));
    assert_string_equal(err, want);
    assert_string_equal(cn_for(t, cctx, "a.test"), "a2.test");

    /* Missing files too. */
    assert_int_equal(unlink(in_tmp("c.crt")), 0);
    assert_int_equal(um_tls_reload(t, NULL, 0), 0);
    assert_string_equal(cn_for(t, cctx, "c.test"), "c.test");

    um_tls_destroy(t);
    SSL_CTX_free(cctx);
}

/* Polls the watch descriptor for up to ms milliseconds and returns how many entries
 * um_tls_on_watch reloaded in that time. */
static int watch_for(struct um_tls *t, int ms)
{
    struct timespec start, now;
    int n = 0;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        long left = ms - ((now.tv_sec - start.tv_sec) * 1000 +
                          (now.tv_nsec - start.tv_nsec) / 1000000);
        if (left <= 0)
            return n;
        struct pollfd p = {.fd = um_tls_watch_fd(t), .events = POLLIN};
        if (poll(&p, 1, (int)left) == 1)
            n += um_tls_on_watch(t);
    }
}

static void test_watch(void **state)
{
    struct um_tls *t = make_store(NULL);
    SSL_CTX *cctx = client_ctx(0, 0, NULL, 0);
    assert_true(um_tls_watch_fd(t) >= 0);
    assert_int_equal(um_tls_on_watch(t), 0);

    /* A certificate rewritten in place. */
    rewrite_cert("a", "a4.test", "DNS:a.test,DNS:*.b.test");
    assert_int_equal(watch_for(t, 1000), 1);
    assert_string_equal(cn_for(t, cctx, "a.test"), "a4.test");

    /* A new pair renamed over the old one: both files change, one reload. */
    make_pair("c", "c2.test", "DNS:c.test", true);
    assert_int_equal(watch_for(t, 1000), 1);
    assert_string_equal(cn_for(t, cctx, "c.test"), "c2.test");

    /* A key, then its certificate a moment later: one reload, after the second file (a
     * reload in between would fail on a key that does not match). */
    pair_gap_ms = UM_TLS_WATCH_DELAY_MS / 2;
    make_pair("a", "a5.test", "DNS:a.test", false);
    pair_gap_ms = 0;
    assert_int_equal(watch_for(t, 1000), 1);
    assert_string_equal(cn_for(t, cctx, "a.test"), "a5.test");

    /* Another file in the same directory reloads nothing. */
    write_text(in_tmp("unrelated.txt"), "x");
    assert_int_equal(watch_for(t, 500), 0);

    um_tls_destroy(t);
    SSL_CTX_free(cctx);
}

static void test_watch_symlink(void **state)
{
    /* Certificates reached through a symlink that is re-pointed, as certbot's live/
     * directory is: the store watches the link's directory and re-reads the link. */
    char text[1024], err[512];
    assert_int_equal(mkdir(in_tmp("archive"), 0755), 0);
    assert_int_equal(mkdir(in_tmp("live"), 0755), 0);
    make_pair("archive/s1", "s1.test", "DNS:s.test", false);
    make_pair("archive/s2", "s2.test", "DNS:s.test", false);
    assert_int_equal(symlink("../archive/s1.crt", in_tmp("live/s.crt")), 0);
    assert_int_equal(symlink("../archive/s1.key", in_tmp("live/s.key")), 0);
    snprintf(text, sizeof text,
             "listen = { { '127.0.0.1:0', tls = true } }\n"
             "tls = { { hosts = { 's.test' }, cert = 'live/s.crt', key = 'live/s.key' } }\n"
             "routes = { { path = '/', root = '.' } }\n");
    write_text(cfgpath, text);
    struct um_config *c = um_config_load(cfgpath, err, sizeof err);
    if (c == NULL)
        fail_msg("%s", err);
    assert_string_equal(um_tls_conf(c)->certs[0].cert, in_tmp("live/s.crt"));
    struct um_tls *t = um_tls_create(c, err, sizeof err);
    assert_non_null(t);
    um_config_unref(c);
    SSL_CTX *cctx = client_ctx(0, 0, NULL, 0);
    assert_string_equal(cn_for(t, cctx, "s.test"), "s1.test");

    assert_int_equal(symlink("../archive/s2.crt", in_tmp("live/s.crt.tmp")), 0);
    assert_int_equal(symlink("../archive/s2.key", in_tmp("live/s.key.tmp")), 0);
    assert_int_equal(rename(in_tmp("live/s.crt.tmp"), in_tmp("live/s.crt")), 0);
    assert_int_equal(rename(in_tmp("live/s.key.tmp"), in_tmp("live/s.key")), 0);
    assert_int_equal(watch_for(t, 1000), 1);
    assert_string_equal(cn_for(t, cctx, "s.test"), "s2.test");

    um_tls_destroy(t);
    SSL_CTX_free(cctx);
}

static void test_io(void **state)
{
    struct um_tls *t = make_store(NULL);
    SSL_CTX *cctx = client_ctx(0, 0, NULL, 0);
    struct conn c;
    char buf[64];
    int want = 0;
    size_t n;

    assert_int_equal(handshake(t, cctx, "a.test", NULL, &c), HS_OK);
    exchange(&c);
    /* Nothing to read yet. */
    assert_int_equal(um_tls_read(c.srv, buf, sizeof buf, &want), UM_AGAIN);
    assert_int_equal(want, UM_TLS_WANT_READ);
    /* A request, read in two parts: the rest stays inside the SSL. */
    assert_int_equal(SSL_write_ex(c.cli, "GET / HTTP/1.1\r\n\r\n", 18, &n), 1);
    assert_int_equal(um_tls_read(c.srv, buf, 4, &want), 4);
    assert_memory_equal(buf, "GET ", 4);
    assert_int_equal(um_tls_pending(c.srv), 14);
    assert_int_equal(um_tls_read(c.srv, buf, sizeof buf, &want), 14);
    assert_int_equal(um_tls_write(c.srv, buf, 0, &want), 0);
    /* close_notify from the client: 0; ours goes out without waiting. */
    assert_int_equal(SSL_shutdown(c.cli), 0);
    assert_int_equal(um_tls_read(c.srv, buf, sizeof buf, &want), 0);
    assert_int_equal(um_tls_shutdown(c.srv, &want), UM_OK);
    conn_close(&c);

    /* A client that just closes the socket: also 0 (HTTP framing detects truncation). */
    assert_int_equal(handshake(t, cctx, "a.test", NULL, &c), HS_OK);
    exchange(&c);
    shutdown(c.fd[1], SHUT_RDWR);
    assert_int_equal(um_tls_read(c.srv, buf, sizeof buf, &want), 0);
    conn_close(&c);

    /* Writing until the socket is full: UM_AGAIN, want write. */
    assert_int_equal(handshake(t, cctx, "a.test", NULL, &c), HS_OK);
    static char big[65536];
    ssize_t w;
    int rounds = 0;
    while ((w = um_tls_write(c.srv, big, sizeof big, &want)) > 0)
        assert_true(++rounds < 1000);
    assert_int_equal(w, UM_AGAIN);
    assert_int_equal(want, UM_TLS_WANT_WRITE);
    conn_close(&c);

    /* Plain HTTP on the TLS port. */
    struct conn p;
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, p.fd), 0);
    p.srv = um_tls_accept_new(t, p.fd[0]);
    p.cli = NULL;
    assert_int_equal(write(p.fd[1], "GET / HTTP/1.1\r\nHost: a\r\n\r\n", 27), 27);
    assert_int_equal(um_tls_handshake(p.srv, &want), UM_ERR);
    assert_string_equal(um_tls_error(p.srv), "http request");
    /* The handshake never finished: nothing to shut down. */
    assert_int_equal(um_tls_shutdown(p.srv, &want), UM_OK);
    conn_close(&p);

    /* A peer that goes away mid-handshake. */
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, p.fd), 0);
    p.srv = um_tls_accept_new(t, p.fd[0]);
    assert_int_equal(um_tls_handshake(p.srv, &want), UM_AGAIN);
    assert_int_equal(want, UM_TLS_WANT_READ);
    close(p.fd[1]);
    p.fd[1] = -1;
    assert_int_equal(um_tls_handshake(p.srv, &want), UM_ERR);
    assert_string_equal(um_tls_error(p.srv), "connection closed by the peer");
    SSL_free(p.srv);
    close(p.fd[0]);

    um_tls_destroy(t);
    SSL_CTX_free(cctx);
}

static void test_store_outlives_destroy(void **state)
{
    /* Connections of a store that was destroyed (an old configuration) keep working; the
     * last SSL_free frees the store (ASan checks both). */
    struct um_tls *t = make_store(NULL);
    SSL_CTX *cctx = client_ctx(0, 0, NULL, 0);
    struct conn c, pending;
    assert_int_equal(handshake(t, cctx, "a.test", NULL, &c), HS_OK);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, pending.fd), 0);
    pending.srv = um_tls_accept_new(t, pending.fd[0]);
    pending.cli = SSL_new(cctx);
    SSL_set_fd(pending.cli, pending.fd[1]);
    SSL_set_connect_state(pending.cli);
    SSL_set_tlsext_host_name(pending.cli, "c.test");
    um_tls_destroy(t);

    exchange(&c);
    conn_close(&c);
    /* A handshake that had not begun still picks its certificate by SNI. */
    int want;
    for (int i = 0; i < 100; i++) {
        int r = um_tls_handshake(pending.srv, &want);
        SSL_do_handshake(pending.cli);
        if (r == UM_OK)
            break;
        assert_int_equal(r, UM_AGAIN);
    }
    assert_string_equal(peer_cn(&pending), "c.test");
    conn_close(&pending);
    SSL_CTX_free(cctx);
}

struct worker_arg {
    struct um_tls *t;
    SSL_CTX *cctx;
    int ok;
};

static void *worker(void *p)
{
    struct worker_arg *a = p;
    static const char *const names[] = {"a.test", "c.test", "x.b.test", NULL};
    for (int i = 0; i < 40; i++) {
        struct conn c;
        const char *sni = names[i % 4];
        if (handshake(a->t, a->cctx, sni, NULL, &c) == HS_OK &&
            SSL_get0_peer_certificate(c.cli) != NULL)
            a->ok++;
        conn_close(&c);
    }
    return NULL;
}

static void test_reload_during_handshakes(void **state)
{
    /* Workers handshaking while the main thread swaps contexts: every handshake succeeds
     * and nothing is freed under a worker (ASan/TSan builds check the latter). */
    struct um_tls *t = make_store(NULL);
    SSL_CTX *cctx = client_ctx(0, 0, NULL, 0);
    struct worker_arg args[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (struct worker_arg){t, cctx, 0};
        assert_int_equal(pthread_create(&th[i], NULL, worker, &args[i]), 0);
    }
    um_log_level = UM_LOG_ERR;
    for (int i = 0; i < 20; i++) {
        assert_int_equal(um_tls_reload(t, NULL, 0), 2);
        um_tls_rotate_tickets(t);
    }
    um_log_level = UM_LOG_WARN;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(args[i].ok, 40);
    }
    um_tls_destroy(t);
    SSL_CTX_free(cctx);
}

static void test_check_pair(void **state)
{
    char reason[256];
    assert_int_equal(um_tls_check_pair(in_tmp("a.crt"), in_tmp("a.key"), reason, sizeof reason),
                     UM_TLS_FAULT_NONE);
    assert_int_equal(um_tls_check_pair(in_tmp("a.crt"), in_tmp("c.key"), reason, sizeof reason),
                     UM_TLS_FAULT_MISMATCH);
    assert_string_equal(reason, "the key does not match the certificate");
    assert_int_equal(um_tls_check_pair(in_tmp("a.key"), in_tmp("a.key"), reason, sizeof reason),
                     UM_TLS_FAULT_CERT);
    assert_string_equal(reason, "no PEM certificate in the file");
    assert_int_equal(um_tls_check_pair(in_tmp("none.crt"), in_tmp("a.key"), reason,
                                       sizeof reason),
                     UM_TLS_FAULT_CERT);
    assert_string_equal(reason, "No such file or directory");
    write_text(in_tmp("cut.crt"), "-----BEGIN CERTIFICATE-----\nMIIB\n");
    assert_int_equal(um_tls_check_pair(in_tmp("cut.crt"), in_tmp("a.key"), reason,
                                       sizeof reason),
                     UM_TLS_FAULT_CERT);
    assert_string_equal(reason, "bad certificate: bad end line");
    assert_int_equal(um_tls_check_pair(in_tmp("a.crt"), in_tmp("a.crt"), reason, sizeof reason),
                     UM_TLS_FAULT_KEY);
    assert_string_equal(reason, "no PEM private key in the file");

    /* A key with a passphrase is refused, without prompting. */
    FILE *f = fopen(in_tmp("a.key"), "rb");
    assert_non_null(f);
    EVP_PKEY *k = PEM_read_PrivateKey(f, NULL, NULL, NULL);
    fclose(f);
    f = fopen(in_tmp("enc.key"), "wb");
    assert_non_null(f);
    assert_int_equal(PEM_write_PrivateKey(f, k, EVP_aes_128_cbc(), (unsigned char *)"secret",
                                          6, NULL, NULL),
                     1);
    fclose(f);
    EVP_PKEY_free(k);
    assert_int_equal(um_tls_check_pair(in_tmp("a.crt"), in_tmp("enc.key"), reason,
                                       sizeof reason),
                     UM_TLS_FAULT_KEY);
    assert_non_null(strstr(reason, "passphrase"));
}

int main(void)
{
    um_modules_init(); /* the modules' settings, as the server's main does */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_sni_selection, test_setup),
        cmocka_unit_test_setup(test_versions, test_setup),
        cmocka_unit_test_setup(test_ciphers, test_setup),
        cmocka_unit_test_setup(test_alpn, test_setup),
        cmocka_unit_test_setup(test_resumption, test_setup),
        cmocka_unit_test_setup(test_ticket_rotation, test_setup),
        cmocka_unit_test_setup(test_reload, test_setup),
        cmocka_unit_test_setup(test_watch, test_setup),
        cmocka_unit_test_setup(test_watch_symlink, test_setup),
        cmocka_unit_test_setup(test_io, test_setup),
        cmocka_unit_test_setup(test_store_outlives_destroy, test_setup),
        cmocka_unit_test_setup(test_reload_during_handshakes, test_setup),
        cmocka_unit_test_setup(test_check_pair, test_setup),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
