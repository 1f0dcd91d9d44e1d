/* SPDX-License-Identifier: BSD-2-Clause */
/* The ACME client's requests (RFC 8555 section 6): libcurl's easy interface on the client's
 * own thread (a blocking call there blocks no worker), JWS-signed POSTs with the nonce of
 * the previous answer, badNonce retried with the nonce the rejection carries, and the CA's
 * JSON read with the project's pull reader (umbra/json.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "umbra/json.h"
#include "umbra/log.h"
#include "acme.h"

/* Answers larger than this are not the CA's (a chain is a few kilobytes). */
#define MAX_BODY (1u << 20)
/* badNonce answers in a row before the request fails. */
#define NONCE_TRIES 8

/* --- JSON ------------------------------------------------------------------------------ */

/* Moves j (over a copy) to the value of member key of the top-level object. */
static bool find_member(struct um_json *j, char *copy, size_t n, const char *key)
{
    um_str k;
    size_t i = 0, kl = strlen(key);
    um_json_init(j, copy, n);
    if (!um_json_enter(j, '{'))
        return false;
    while (um_json_more(j, '}', &i)) {
        if (!um_json_key(j, &k))
            return false;
        if (k.len == kl && memcmp(k.base, key, kl) == 0)
            return true;
        if (!um_json_skip(j))
            return false;
    }
    return false;
}

char *um__acme_jstr(const char *s, size_t n, const char *key)
{
    struct um_json j;
    um_str v;
    char *copy = um_strndup(s, n), *out = NULL;
    if (find_member(&j, copy, n, key) && um_json_peek(&j) == '"' && um_json_string(&j, &v))
        out = um_strndup(v.base, v.len);
    free(copy);
    return out;
}

bool um__acme_jspan(const char *s, size_t n, const char *key, const char **vs, size_t *vn)
{
    struct um_json j;
    char *copy = um_strndup(s, n);
    bool ok = find_member(&j, copy, n, key) && um_json_peek(&j) != 0;
    if (ok) {
        /* The reader decodes strings in place, behind its read position: offsets into the
         * copy are offsets into s. */
        size_t start = (size_t)(j.p - j.start);
        ok = um_json_skip(&j);
        *vs = s + start;
        *vn = (size_t)(j.p - j.start) - start;
    }
    free(copy);
    return ok;
}

size_t um__acme_jarray(const char *s, size_t n, const char **vs, size_t *vn, size_t max)
{
    struct um_json j;
    size_t i = 0, got = 0;
    char *copy = um_strndup(s, n);
    um_json_init(&j, copy, n);
    if (um_json_enter(&j, '[')) {
        while (got < max && um_json_more(&j, ']', &i) && um_json_peek(&j) != 0) {
            size_t start = (size_t)(j.p - j.start);
            if (!um_json_skip(&j))
                break;
            vs[got] = s + start;
            vn[got++] = (size_t)(j.p - j.start) - start;
        }
    }
    free(copy);
    return got;
}

void um__acme_problem(const char *s, size_t n, char *out, size_t len)
{
    char *type = um__acme_jstr(s, n, "type"), *detail = um__acme_jstr(s, n, "detail");
    if (type == NULL && detail == NULL)
        snprintf(out, len, "%.*s", (int)(n > 300 ? 300 : n), s);
    else
        snprintf(out, len, "%s: %s", type ? type : "(no type)", detail ? detail : "(no detail)");
    free(type);
    free(detail);
}

/* --- HTTP ------------------------------------------------------------------------------ */

struct call {
    struct um__acme *a;
    struct um__acme_resp *r;
};

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    struct call *c = arg;
    if (c->r->body.len + size * n > MAX_BODY)
        return 0;
    um_buf_append(&c->r->body, p, size * n);
    return size * n;
}

/* The value of header line p (of n bytes) named name, trimmed, malloc'd; or NULL. */
static char *header_value(const char *p, size_t n, const char *name)
{
    size_t nl = strlen(name);
    if (n <= nl || strncasecmp(p, name, nl) != 0 || p[nl] != ':')
        return NULL;
    p += nl + 1;
    n -= nl + 1;
    while (n > 0 && (*p == ' ' || *p == '\t'))
        p++, n--;
    while (n > 0 && (p[n - 1] == '\r' || p[n - 1] == '\n' || p[n - 1] == ' '))
        n--;
    return um_strndup(p, n);
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    struct call *c = arg;
    size_t len = size * n;
    char *v;
    if ((v = header_value(p, len, "Replay-Nonce")) != NULL) {
        free(c->a->nonce);
        c->a->nonce = v;
    } else if ((v = header_value(p, len, "Location")) != NULL) {
        free(c->r->location);
        c->r->location = v;
    } else if ((v = header_value(p, len, "Retry-After")) != NULL) {
        /* Seconds; an HTTP date is read as "soon" (the caller's own pace). */
        c->r->retry_after = strtod(v, NULL);
        free(v);
    } else if ((v = header_value(p, len, "Content-Type")) != NULL) {
        c->r->pem = strncasecmp(v, "application/pem-certificate-chain", 33) == 0;
        free(v);
    }
    return len;
}

/* Aborts a transfer when the client stops (um__acme_halt). */
static int on_progress(void *arg, curl_off_t a1, curl_off_t a2, curl_off_t a3, curl_off_t a4)
{
    (void)a1, (void)a2, (void)a3, (void)a4;
    return atomic_load(&((struct um__acme *)arg)->stop) ? 1 : 0;
}

void um__acme_resp_dispose(struct um__acme_resp *r)
{
    um_buf_dispose(&r->body);
    free(r->location);
    memset(r, 0, sizeof *r);
}

bool um__acme_http(struct um__acme *a, const char *url, const char *body, bool head,
                   struct um__acme_resp *r, char *err, size_t errlen)
{
    CURL *h = a->curl;
    struct call c = {a, r};
    struct curl_slist *hdrs = NULL;
    um__acme_resp_dispose(r);
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 15L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "umbra-acme");
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &c);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &c);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, a);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    if (a->ca_file != NULL)
        curl_easy_setopt(h, CURLOPT_CAINFO, a->ca_file);
    if (head)
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    if (body != NULL) {
        hdrs = curl_slist_append(hdrs, "Content-Type: application/jose+json");
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    }
    hdrs = curl_slist_append(hdrs, "Accept: application/pem-certificate-chain, application/json");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    CURLcode rc = curl_easy_perform(h);
    curl_slist_free_all(hdrs);
    if (rc != CURLE_OK) {
        snprintf(err, errlen, "%s: %s", url, curl_easy_strerror(rc));
        return false;
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
    return true;
}

bool um__acme_directory(struct um__acme *a, char *err, size_t errlen)
{
    struct um__acme_resp r = {0};
    if (a->new_order != NULL)
        return true;
    bool ok = um__acme_http(a, a->directory, NULL, false, &r, err, errlen);
    if (ok && r.status != 200) {
        snprintf(err, errlen, "%s: HTTP status %ld", a->directory, r.status);
        ok = false;
    }
    if (ok) {
        a->new_nonce = um__acme_jstr(r.body.base, r.body.len, "newNonce");
        a->new_account = um__acme_jstr(r.body.base, r.body.len, "newAccount");
        a->new_order = um__acme_jstr(r.body.base, r.body.len, "newOrder");
        a->renewal_info = um__acme_jstr(r.body.base, r.body.len, "renewalInfo");
        if (a->new_nonce == NULL || a->new_account == NULL || a->new_order == NULL) {
            snprintf(err, errlen, "%s: not an ACME directory (no newNonce, newAccount, newOrder)",
                     a->directory);
            free(a->new_nonce), free(a->new_account), free(a->new_order), free(a->renewal_info);
            a->new_nonce = a->new_account = a->new_order = a->renewal_info = NULL;
            ok = false;
        }
    }
    um__acme_resp_dispose(&r);
    return ok;
}

/* The protected header of a request to url: the account's kid once it has one, its JWK
 * for newAccount (RFC 8555 section 6.2). */
static void protected_header(struct um__acme *a, const char *url, struct um_buf *b)
{
    um_buf_printf(b, "{\"alg\":\"ES256\",\"nonce\":\"%s\",\"url\":\"%s\",", a->nonce, url);
    if (a->kid != NULL)
        um_buf_printf(b, "\"kid\":\"%s\"}", a->kid);
    else
        um_buf_printf(b, "\"jwk\":%s}", a->jwk);
}

bool um__acme_post(struct um__acme *a, const char *url, const char *payload,
                   struct um__acme_resp *r, char *err, size_t errlen)
{
    struct um_buf prot, jws;
    um_buf_init(&prot);
    um_buf_init(&jws);
    bool ok = false;
    for (int tries = 0; tries < NONCE_TRIES && !atomic_load(&a->stop); tries++) {
        if (a->nonce == NULL &&
            (!um__acme_http(a, a->new_nonce, NULL, true, r, err, errlen) || a->nonce == NULL)) {
            if (a->nonce == NULL && r->status != 0)
                snprintf(err, errlen, "%s: no Replay-Nonce (HTTP status %ld)", a->new_nonce,
                         r->status);
            break;
        }
        um_buf_reset(&prot);
        um_buf_reset(&jws);
        protected_header(a, url, &prot);
        /* A nonce is good once: the answer brings the next. */
        free(a->nonce);
        a->nonce = NULL;
        if (!um__acme_jws(a->account, prot.base, payload, &jws)) {
            snprintf(err, errlen, "cannot sign the request (ES256)");
            break;
        }
        if (!um__acme_http(a, url, jws.base, false, r, err, errlen))
            break;
        if (r->status >= 200 && r->status < 300) {
            ok = true;
            break;
        }
        char *type = um__acme_jstr(r->body.base, r->body.len, "type");
        bool bad_nonce = type != NULL && strcmp(type, "urn:ietf:params:acme:error:badNonce") == 0;
        free(type);
        um__acme_problem(r->body.base, r->body.len, err, errlen);
        if (!bad_nonce) {
            if (r->retry_after > 0) /* the next order waits at least this long */
                a->retry_hint = r->retry_after;
            break;
        }
        um_log_debug("acme: %s: the CA refused the nonce (%s); trying again", url, err);
    }
    um_buf_dispose(&prot);
    um_buf_dispose(&jws);
    return ok;
}
