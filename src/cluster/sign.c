/* The signature of peer requests: HMAC-SHA256, with the cluster's shared secret, of
 *
 *     METHOD SP TARGET LF KEY LF TS
 *
 * carried as "Umbra-Peer: ts=TS, key=HEX(KEY), sig=HEX(MAC)". The key travels hex-encoded
 * because a hook's cache key may hold any byte. A signature is good for UM_CLUSTER_WINDOW
 * seconds either side of the receiver's clock: a captured request cannot be replayed
 * later, and it cannot be turned into another one (the method, target and key are under
 * the MAC). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "umbra/cluster.h"

static const char hexd[] = "0123456789abcdef";

static int unhex(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* HMAC-SHA256 (RFC 2104) with the key schedule made once: the states after the inner
 * and the outer padded keys, which each MAC copies instead of hashing the key again (the
 * one-shot HMAC() costs about six times as much). The templates are only read after
 * creation, so any thread may use them. */
struct um_cluster_mac {
    EVP_MD *md;
    EVP_MD_CTX *inner, *outer;
};

struct um_cluster_mac *um_cluster_mac_create(const char *secret)
{
    struct um_cluster_mac *m = um_calloc(1, sizeof(*m));
    unsigned char k[64] = {0}, ipad[64], opad[64];
    size_t kl = strlen(secret);
    m->md = EVP_MD_fetch(NULL, "SHA256", NULL);
    UM_ASSERT(m->md != NULL);
    if (kl > sizeof k) {
        unsigned int dl = 0;
        UM_ASSERT(EVP_Digest(secret, kl, k, &dl, m->md, NULL) == 1);
    } else {
        memcpy(k, secret, kl);
    }
    for (size_t i = 0; i < sizeof k; i++) {
        ipad[i] = k[i] ^ 0x36;
        opad[i] = k[i] ^ 0x5c;
    }
    m->inner = EVP_MD_CTX_new();
    m->outer = EVP_MD_CTX_new();
    UM_ASSERT(m->inner && m->outer && EVP_DigestInit_ex(m->inner, m->md, NULL) == 1 &&
              EVP_DigestUpdate(m->inner, ipad, sizeof ipad) == 1 &&
              EVP_DigestInit_ex(m->outer, m->md, NULL) == 1 &&
              EVP_DigestUpdate(m->outer, opad, sizeof opad) == 1);
    OPENSSL_cleanse(k, sizeof k);
    OPENSSL_cleanse(ipad, sizeof ipad);
    OPENSSL_cleanse(opad, sizeof opad);
    return m;
}

void um_cluster_mac_destroy(struct um_cluster_mac *m)
{
    if (m == NULL) return;
    EVP_MD_CTX_free(m->inner);
    EVP_MD_CTX_free(m->outer);
    EVP_MD_free(m->md);
    free(m);
}

/* The MAC of (method, target, key, ts) into mac (32 bytes). */
static bool mac_of(const struct um_cluster_mac *m, um_str method, um_str target, um_str key,
                   int64_t ts, unsigned char *mac)
{
    char tsb[24];
    int tl = snprintf(tsb, sizeof tsb, "%lld", (long long)ts);
    unsigned char inner[EVP_MAX_MD_SIZE];
    unsigned int il = 0, ml = 0;
    EVP_MD_CTX *w = EVP_MD_CTX_new();
    bool ok =
        w != NULL && EVP_MD_CTX_copy_ex(w, m->inner) == 1 &&
        EVP_DigestUpdate(w, method.base, method.len) == 1 && EVP_DigestUpdate(w, " ", 1) == 1 &&
        EVP_DigestUpdate(w, target.base, target.len) == 1 && EVP_DigestUpdate(w, "\n", 1) == 1 &&
        (key.len == 0 || EVP_DigestUpdate(w, key.base, key.len) == 1) &&
        EVP_DigestUpdate(w, "\n", 1) == 1 && EVP_DigestUpdate(w, tsb, (size_t)tl) == 1 &&
        EVP_DigestFinal_ex(w, inner, &il) == 1 && EVP_MD_CTX_copy_ex(w, m->outer) == 1 &&
        EVP_DigestUpdate(w, inner, il) == 1 && EVP_DigestFinal_ex(w, mac, &ml) == 1 && ml == 32;
    EVP_MD_CTX_free(w);
    return ok;
}

size_t um_cluster_sign_len(size_t klen)
{
    return sizeof("ts=, key=, sig=") + 24 + 2 * klen + 64;
}

size_t um_cluster_sign(const struct um_cluster_mac *secret, um_str method, um_str target,
                       um_str key, int64_t now, char *out, size_t outsz)
{
    unsigned char mac[32];
    if (outsz < um_cluster_sign_len(key.len) || !mac_of(secret, method, target, key, now, mac))
        return 0;
    int o = snprintf(out, outsz, "ts=%lld, key=", (long long)now);
    size_t p = (size_t)o;
    for (size_t i = 0; i < key.len; i++) {
        out[p++] = hexd[(unsigned char)key.base[i] >> 4];
        out[p++] = hexd[(unsigned char)key.base[i] & 15];
    }
    memcpy(out + p, ", sig=", 6);
    p += 6;
    for (size_t i = 0; i < 32; i++) {
        out[p++] = hexd[mac[i] >> 4];
        out[p++] = hexd[mac[i] & 15];
    }
    out[p] = '\0';
    return p;
}

/* The value of "name=" in v (up to the next ',' or the end, trimmed), or base NULL. */
static um_str param(um_str v, const char *name)
{
    size_t nl = strlen(name);
    size_t i = 0;
    while (i < v.len) {
        while (i < v.len && (v.base[i] == ' ' || v.base[i] == '\t' || v.base[i] == ','))
            i++;
        size_t start = i;
        while (i < v.len && v.base[i] != ',')
            i++;
        um_str item = {v.base + start, i - start};
        while (item.len && (item.base[item.len - 1] == ' ' || item.base[item.len - 1] == '\t'))
            item.len--;
        if (item.len > nl && memcmp(item.base, name, nl) == 0 && item.base[nl] == '=')
            return (um_str){item.base + nl + 1, item.len - nl - 1};
    }
    return (um_str){NULL, 0};
}

bool um_cluster_verify(const struct um_cluster_mac *secret, um_str method, um_str target, um_str v,
                       int64_t now, char *key, size_t keysz, size_t *klen)
{
    um_str ts = param(v, "ts"), hk = param(v, "key"), sig = param(v, "sig");
    if (ts.base == NULL || hk.base == NULL || sig.base == NULL || sig.len != 64 ||
        hk.len % 2 != 0 || hk.len / 2 > keysz || ts.len == 0 || ts.len > 18)
        return false;
    int64_t t = 0;
    for (size_t i = 0; i < ts.len; i++) {
        if (ts.base[i] < '0' || ts.base[i] > '9') return false;
        t = t * 10 + (ts.base[i] - '0');
    }
    if (t > now + UM_CLUSTER_WINDOW || t < now - UM_CLUSTER_WINDOW) return false;
    for (size_t i = 0; i < hk.len / 2; i++) {
        int a = unhex(hk.base[2 * i]), b = unhex(hk.base[2 * i + 1]);
        if (a < 0 || b < 0) return false;
        key[i] = (char)(a << 4 | b);
    }
    unsigned char want[32], got[32];
    for (size_t i = 0; i < 32; i++) {
        int a = unhex(sig.base[2 * i]), b = unhex(sig.base[2 * i + 1]);
        if (a < 0 || b < 0) return false;
        got[i] = (unsigned char)(a << 4 | b);
    }
    if (!mac_of(secret, method, target, (um_str){key, hk.len / 2}, t, want)) return false;
    if (CRYPTO_memcmp(want, got, 32) != 0) return false;
    *klen = hk.len / 2;
    return true;
}
