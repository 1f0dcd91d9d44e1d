/* SPDX-License-Identifier: BSD-2-Clause */
/* ACME renewal information (ARI, RFC 9773): when the directory names a renewalInfo
 * resource, the CA's suggested renewal window for a stored certificate moves its renewal
 * earlier (a CA revoking certificates early asks for that), at a random time inside the
 * window; the order that renews it names the certificate it replaces. A CA without ARI,
 * or an ARI request that fails, leaves the renew_before schedule alone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include "umbra/log.h"
#include "umbra/base64.h"
#include "acme.h"

/* How often the window is asked for when the CA does not say (RFC 9773 suggests hours). */
#define ARI_RECHECK (6 * 3600.0)

void um__acme_cert_id_of(const unsigned char *aki, size_t an, const unsigned char *serial,
                         size_t sn, struct um_buf *b)
{
    um_base64_append(b, aki, an, true);
    um_buf_append_char(b, '.');
    um_base64_append(b, serial, sn, true);
}

bool um__acme_cert_id(const char *path, struct um_buf *b)
{
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return false;
    X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    bool ok = false;
    unsigned char *der = NULL;
    const ASN1_OCTET_STRING *aki = x != NULL ? X509_get0_authority_key_id(x) : NULL;
    int dl = x != NULL ? i2d_ASN1_INTEGER(X509_get0_serialNumber(x), &der) : -1;
    /* The serial's DER content octets: past the tag and a short length (a serial is at most
     * 20 octets, RFC 5280). */
    if (aki != NULL && dl > 2 && der[1] == dl - 2) {
        um__acme_cert_id_of(ASN1_STRING_get0_data(aki), (size_t)ASN1_STRING_length(aki),
                            der + 2, (size_t)dl - 2, b);
        ok = true;
    }
    OPENSSL_free(der);
    X509_free(x);
    ERR_clear_error();
    return ok;
}

bool um__acme_parse_time(const char *s, double *out)
{
    struct tm tm = {0};
    int consumed = 0;
    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
               &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &consumed) != 6 || consumed != 19)
        return false;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    double t = (double)timegm(&tm);
    const char *p = s + 19;
    if (*p == '.') { /* fractions of a second: ignored */
        p++;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    if ((*p == 'Z' || *p == 'z') && p[1] == '\0') {
        *out = t;
        return true;
    }
    int hh, mm, n = 0;
    if ((*p == '+' || *p == '-') && sscanf(p + 1, "%2d:%2d%n", &hh, &mm, &n) == 2 && n == 5 &&
        p[6] == '\0') {
        double off = hh * 3600.0 + mm * 60.0;
        *out = *p == '+' ? t - off : t + off;
        return true;
    }
    return false;
}

double um__acme_ari_due(struct um__acme *a, const char *cert, double now, double *recheck,
                        char **cert_id)
{
    struct um_buf id, url;
    struct um__acme_resp r = {0};
    char err[512];
    double due = 0;
    *recheck = ARI_RECHECK;
    if (a->renewal_info == NULL)
        return 0;
    um_buf_init(&id);
    um_buf_init(&url);
    if (!um__acme_cert_id(cert, &id))
        goto out;
    um_buf_printf(&url, "%s%s%s", a->renewal_info,
                  a->renewal_info[strlen(a->renewal_info) - 1] == '/' ? "" : "/", id.base);
    if (!um__acme_http(a, url.base, NULL, false, &r, err, sizeof err) || r.status != 200) {
        um_log_debug("acme: renewal information %s: %s", url.base,
                     r.status ? "not 200" : err);
        goto out;
    }
    const char *ws;
    size_t wn;
    char *start = NULL, *end = NULL;
    double ts, te;
    if (um__acme_jspan(r.body.base, r.body.len, "suggestedWindow", &ws, &wn)) {
        start = um__acme_jstr(ws, wn, "start");
        end = um__acme_jstr(ws, wn, "end");
    }
    if (start != NULL && end != NULL && um__acme_parse_time(start, &ts) &&
        um__acme_parse_time(end, &te) && te >= ts) {
        unsigned r32 = 0;
        RAND_bytes((unsigned char *)&r32, sizeof r32);
        due = ts + (te - ts) * (r32 / 4294967296.0);
        if (due < now)
            due = now;
        free(*cert_id);
        *cert_id = um_buf_detach(&id);
    }
    free(start);
    free(end);
    if (r.retry_after > 0)
        *recheck = r.retry_after;
out:
    um__acme_resp_dispose(&r);
    um_buf_dispose(&id);
    um_buf_dispose(&url);
    return due;
}
