/* SPDX-License-Identifier: BSD-2-Clause */
/* The pure parts of the ACME client (acme.h): the account key's JWK and its
 * thumbprint, JWS ES256 signatures, the CSR, and the files the client keeps (written
 * atomically, mode 0600, since they hold private keys). OpenSSL 3's EVP interfaces only. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "umbra/base64.h"
#include "umbra/buf.h"
#include "acme.h"

EVP_PKEY *um__acme_key_new(void)
{
    EVP_PKEY *k = EVP_EC_gen("P-256");
    ERR_clear_error();
    return k;
}

/* The 32-byte big-endian coordinate of the public point named by param. */
static bool coordinate(EVP_PKEY *key, const char *param, unsigned char out[32])
{
    BIGNUM *bn = NULL;
    bool ok = EVP_PKEY_get_bn_param(key, param, &bn) == 1 && BN_bn2binpad(bn, out, 32) == 32;
    BN_free(bn);
    return ok;
}

bool um__acme_jwk(EVP_PKEY *key, struct um_buf *b)
{
    unsigned char x[32], y[32];
    if (!coordinate(key, OSSL_PKEY_PARAM_EC_PUB_X, x) ||
        !coordinate(key, OSSL_PKEY_PARAM_EC_PUB_Y, y)) {
        ERR_clear_error();
        return false;
    }
    um_buf_append_str(b, "{\"crv\":\"P-256\",\"kty\":\"EC\",\"x\":\"");
    um_base64_append(b, x, 32, true);
    um_buf_append_str(b, "\",\"y\":\"");
    um_base64_append(b, y, 32, true);
    um_buf_append_str(b, "\"}");
    return true;
}

void um__acme_thumbprint(const char *jwk, size_t len, struct um_buf *b)
{
    unsigned char md[32];
    unsigned int mdlen = 0;
    EVP_Digest(jwk, len, md, &mdlen, EVP_sha256(), NULL);
    um_base64_append(b, md, mdlen, true);
}

/* An ECDSA DER signature as the fixed-width r || s that JWS ES256 wants (RFC 7518 3.4). */
static bool der_to_raw(const unsigned char *der, size_t n, unsigned char raw[64])
{
    ECDSA_SIG *sig = d2i_ECDSA_SIG(NULL, &der, (long)n);
    if (sig == NULL)
        return false;
    const BIGNUM *r, *s;
    ECDSA_SIG_get0(sig, &r, &s);
    bool ok = BN_bn2binpad(r, raw, 32) == 32 && BN_bn2binpad(s, raw + 32, 32) == 32;
    ECDSA_SIG_free(sig);
    return ok;
}

bool um__acme_jws(EVP_PKEY *key, const char *prot, const char *payload, struct um_buf *b)
{
    struct um_buf input;
    unsigned char der[80], raw[64];
    size_t derlen = sizeof der;
    bool ok = false;
    um_buf_init(&input);
    um_base64_append(&input, prot, strlen(prot), true);
    size_t prot_len = input.len;
    um_buf_append_char(&input, '.');
    um_base64_append(&input, payload, strlen(payload), true);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (md == NULL || EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, key) != 1 ||
        EVP_DigestSign(md, der, &derlen, (unsigned char *)input.base, input.len) != 1 ||
        !der_to_raw(der, derlen, raw))
        goto out;
    um_buf_append_str(b, "{\"protected\":\"");
    um_buf_append(b, input.base, prot_len);
    um_buf_append_str(b, "\",\"payload\":\"");
    um_buf_append(b, input.base + prot_len + 1, input.len - prot_len - 1);
    um_buf_append_str(b, "\",\"signature\":\"");
    um_base64_append(b, raw, sizeof raw, true);
    um_buf_append_str(b, "\"}");
    ok = true;
out:
    ERR_clear_error();
    EVP_MD_CTX_free(md);
    um_buf_dispose(&input);
    return ok;
}

bool um__acme_csr(EVP_PKEY *key, char *const *names, size_t n, struct um_buf *b)
{
    bool ok = false;
    unsigned char *der = NULL;
    struct um_buf san;
    um_buf_init(&san);
    X509_REQ *req = X509_REQ_new();
    X509_NAME *subj = X509_NAME_new();
    STACK_OF(X509_EXTENSION) *exts = sk_X509_EXTENSION_new_null();
    X509_EXTENSION *ext = NULL;
    if (req == NULL || subj == NULL || exts == NULL || n == 0)
        goto out;
    for (size_t i = 0; i < n; i++)
        um_buf_printf(&san, "%sDNS:%s", i ? "," : "", names[i]);
    if (X509_NAME_add_entry_by_txt(subj, "CN", MBSTRING_ASC, (const unsigned char *)names[0],
                                   -1, -1, 0) != 1 ||
        X509_REQ_set_subject_name(req, subj) != 1 || X509_REQ_set_version(req, 0) != 1 ||
        X509_REQ_set_pubkey(req, key) != 1)
        goto out;
    ext = X509V3_EXT_conf_nid(NULL, NULL, NID_subject_alt_name, san.base);
    if (ext == NULL || sk_X509_EXTENSION_push(exts, ext) == 0)
        goto out;
    ext = NULL; /* the stack's */
    if (X509_REQ_add_extensions(req, exts) != 1 || X509_REQ_sign(req, key, EVP_sha256()) <= 0)
        goto out;
    int len = i2d_X509_REQ(req, &der);
    if (len <= 0)
        goto out;
    um_base64_append(b, der, (size_t)len, true);
    ok = true;
out:
    ERR_clear_error();
    OPENSSL_free(der);
    X509_EXTENSION_free(ext);
    sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
    X509_NAME_free(subj);
    X509_REQ_free(req);
    um_buf_dispose(&san);
    return ok;
}

bool um__acme_write_file(const char *path, const void *data, size_t n)
{
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid()) >= sizeof tmp) {
        errno = ENAMETOOLONG;
        return false;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return false;
    const char *p = data;
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, p + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            goto fail;
        done += (size_t)w;
    }
    /* The data reaches the disk before the name does: a crash leaves the old file or the
     * new one, never a short one. */
    if (fchmod(fd, 0600) != 0 || fsync(fd) != 0)
        goto fail;
    if (close(fd) != 0) {
        fd = -1;
        goto fail;
    }
    fd = -1;
    if (rename(tmp, path) != 0)
        goto fail;
    return true;
fail:;
    int e = errno;
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    errno = e;
    return false;
}

bool um__acme_key_pem(EVP_PKEY *key, struct um_buf *b)
{
    BIO *bio = BIO_new(BIO_s_mem());
    char *p;
    bool ok = bio != NULL && PEM_write_bio_PrivateKey(bio, key, NULL, NULL, 0, NULL, NULL) == 1;
    long n = ok ? BIO_get_mem_data(bio, &p) : 0;
    if (ok && n > 0)
        um_buf_append(b, p, (size_t)n);
    BIO_free(bio);
    ERR_clear_error();
    return ok && n > 0;
}

EVP_PKEY *um__acme_key_load(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "re");
    if (f != NULL) {
        EVP_PKEY *k = PEM_read_PrivateKey(f, NULL, NULL, NULL);
        fclose(f);
        ERR_clear_error();
        if (k == NULL)
            snprintf(err, errlen, "%s: not a PEM private key", path);
        return k;
    }
    if (errno != ENOENT) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    struct um_buf pem;
    um_buf_init(&pem);
    EVP_PKEY *k = um__acme_key_new();
    if (k == NULL || !um__acme_key_pem(k, &pem)) {
        snprintf(err, errlen, "cannot make an ECDSA P-256 key");
    } else if (!um__acme_write_file(path, pem.base, pem.len)) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
    } else {
        um_buf_dispose(&pem);
        return k;
    }
    EVP_PKEY_free(k);
    um_buf_dispose(&pem);
    return NULL;
}

bool um__acme_cert_times(const char *path, double *not_before, double *not_after)
{
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return false;
    X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    bool ok = false;
    struct tm tb, ta;
    if (x != NULL && ASN1_TIME_to_tm(X509_get0_notBefore(x), &tb) == 1 &&
        ASN1_TIME_to_tm(X509_get0_notAfter(x), &ta) == 1) {
        *not_before = (double)timegm(&tb);
        *not_after = (double)timegm(&ta);
        ok = true;
    }
    X509_free(x);
    ERR_clear_error();
    return ok;
}

/* id-pe-acmeIdentifier (RFC 8737 section 6.1). */
#define ACME_IDENTIFIER_OID "1.3.6.1.5.5.7.1.31"

bool um__acme_alpn_cert(const char *name, const char *keyauth, X509 **out_cert,
                        EVP_PKEY **out_key)
{
    unsigned char md[32];
    unsigned int mdlen = 0;
    bool ok = false;
    X509 *x = X509_new();
    EVP_PKEY *key = um__acme_key_new();
    ASN1_OCTET_STRING *digest = ASN1_OCTET_STRING_new(), *value = ASN1_OCTET_STRING_new();
    ASN1_OBJECT *oid = OBJ_txt2obj(ACME_IDENTIFIER_OID, 1);
    X509_EXTENSION *ext = NULL, *san = NULL;
    unsigned char *der = NULL;
    int derlen;
    char sanv[300];
    if (x == NULL || key == NULL || digest == NULL || value == NULL || oid == NULL ||
        EVP_Digest(keyauth, strlen(keyauth), md, &mdlen, EVP_sha256(), NULL) != 1 ||
        ASN1_OCTET_STRING_set(digest, md, (int)mdlen) != 1)
        goto out;
    /* The extension's value is the DER of an OCTET STRING holding the digest. */
    derlen = i2d_ASN1_OCTET_STRING(digest, &der);
    if (derlen <= 0 || ASN1_OCTET_STRING_set(value, der, derlen) != 1)
        goto out;
    ext = X509_EXTENSION_create_by_OBJ(NULL, oid, 1, value);
    snprintf(sanv, sizeof sanv, "DNS:%s", name);
    san = X509V3_EXT_conf_nid(NULL, NULL, NID_subject_alt_name, sanv);
    unsigned char serial[16];
    EVP_Digest(md, mdlen, serial, NULL, EVP_md5(), NULL);
    serial[0] &= 0x7f;
    BIGNUM *bn = BN_bin2bn(serial, sizeof serial, NULL);
    if (ext == NULL || san == NULL || bn == NULL ||
        BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) == NULL ||
        X509_set_version(x, 2) != 1 || X509_gmtime_adj(X509_getm_notBefore(x), -3600) == NULL ||
        X509_gmtime_adj(X509_getm_notAfter(x), 7 * 86400) == NULL ||
        X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC,
                                   (const unsigned char *)name, -1, -1, 0) != 1 ||
        X509_set_issuer_name(x, X509_get_subject_name(x)) != 1 || X509_set_pubkey(x, key) != 1 ||
        X509_add_ext(x, san, -1) != 1 || X509_add_ext(x, ext, -1) != 1 ||
        X509_sign(x, key, EVP_sha256()) <= 0) {
        BN_free(bn);
        goto out;
    }
    BN_free(bn);
    *out_cert = x;
    *out_key = key;
    x = NULL;
    key = NULL;
    ok = true;
out:
    ERR_clear_error();
    OPENSSL_free(der);
    X509_EXTENSION_free(ext);
    X509_EXTENSION_free(san);
    ASN1_OBJECT_free(oid);
    ASN1_OCTET_STRING_free(digest);
    ASN1_OCTET_STRING_free(value);
    X509_free(x);
    EVP_PKEY_free(key);
    return ok;
}
