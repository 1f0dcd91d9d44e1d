/* SPDX-License-Identifier: BSD-2-Clause */
/* The TLS module's check of a loaded config (um_tls_check_config): the configuration
 * module records the settings as written and where; OpenSSL's verdict on them comes from
 * here, so that the configuration floor never calls up into TLS. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "umbra/config.h"
#include "umbra/tls.h"

/* "FILE:LINE: message", or "FILE: message" without a line, as the loader writes them. */
static bool fail(const struct um_config *c, int line, char *err, size_t errlen, const char *msg)
{
    if (err != NULL && errlen > 0) {
        if (line > 0)
            snprintf(err, errlen, "%s:%d: %s", c->file, line, msg);
        else
            snprintf(err, errlen, "%s: %s", c->file, msg);
    }
    return false;
}

static bool check_pair(const struct um_config *c, size_t i, char *err, size_t errlen)
{
    const struct um_tls_cert_conf *cc = &um_tls_conf(c)->certs[i];
    char reason[512], msg[4096];
    if (cc->acme) {
        /* Nothing stored yet is not a fault: the CA is asked for it. What is stored must
         * load, or it would be served. */
        if (access(cc->cert, F_OK) != 0)
            return true;
        if (um_tls_check_pair(cc->cert, cc->key, reason, sizeof reason) == UM_TLS_FAULT_NONE)
            return true;
        snprintf(msg, sizeof msg, "tls.%zu.acme: the stored %s: %s (remove it to order a new "
                 "one)", i + 1, cc->cert, reason);
        return fail(c, cc->line, err, errlen, msg);
    }
    switch (um_tls_check_pair(cc->cert, cc->key, reason, sizeof reason)) {
    case UM_TLS_FAULT_NONE:
        return true;
    case UM_TLS_FAULT_CERT:
        snprintf(msg, sizeof msg, "tls.%zu.cert: %s: %s", i + 1, cc->cert_name, reason);
        return fail(c, cc->cert_line, err, errlen, msg);
    case UM_TLS_FAULT_KEY:
        snprintf(msg, sizeof msg, "tls.%zu.key: %s: %s", i + 1, cc->key_name, reason);
        return fail(c, cc->key_line, err, errlen, msg);
    case UM_TLS_FAULT_MISMATCH:
    default:
        snprintf(msg, sizeof msg, "tls.%zu.key: %s does not match the certificate %s", i + 1,
                 cc->key_name, cc->cert_name);
        return fail(c, cc->key_line, err, errlen, msg);
    }
}

static bool check_ciphers(const struct um_config *c, const char *key, const char *list,
                          bool tls13, int line, char *err, size_t errlen)
{
    char reason[512], msg[4096];
    if (list == NULL || um_tls_check_ciphers(list, tls13, reason, sizeof reason))
        return true;
    snprintf(msg, sizeof msg, "tls.%s: %s", key, reason);
    return fail(c, line, err, errlen, msg);
}

/* The ACME client writes the account key and the certificates into tls.acme.storage as
 * the user the server runs as. */
static bool check_storage(const struct um_config *c, char *err, size_t errlen)
{
    const struct um_tls_acme_conf *ac = &um_tls_conf(c)->acme;
    char msg[4096];
    if (ac->storage == NULL || access(ac->storage, W_OK | X_OK) == 0)
        return true;
    snprintf(msg, sizeof msg, "tls.acme.storage: cannot write in %s: %s", ac->storage,
             strerror(errno));
    return fail(c, ac->storage_line, err, errlen, msg);
}

bool um_tls_check_config(const struct um_config *c, char *err, size_t errlen)
{
    const struct um_tls_conf *tc = um_tls_conf(c);
    if (!check_storage(c, err, errlen))
        return false;
    for (size_t i = 0; i < tc->num_certs; i++)
        if (!check_pair(c, i, err, errlen))
            return false;
    return check_ciphers(c, "ciphers", tc->ciphers, false, tc->ciphers_line, err, errlen) &&
           check_ciphers(c, "ciphersuites", tc->ciphersuites, true, tc->ciphersuites_line, err,
                         errlen);
}
