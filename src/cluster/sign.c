/* SPDX-License-Identifier: BSD-2-Clause */
/* The signature of peer requests: HMAC-SHA256, with the cluster's shared secret, of
 *
 *     METHOD SP TARGET LF KEY LF TS
 *
 * carried as "Umbra-Peer: ts=TS, key=HEX(KEY), sig=HEX(MAC)". The key travels hex-encoded
 * because a hook's cache key may hold any byte. A signature is good for UM_CLUSTER_WINDOW
 * seconds either side of the receiver's clock: a captured request cannot be replayed
 * later, and it cannot be turned into another one (the method, target and key are under
 * the MAC). */
#include <stdlib.h>
#include <string.h>

/* SHA256_CTX and its functions, deprecated since OpenSSL 3.0 (see um_cluster_mac). */
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "umbra/cluster.h"
#include "umbra/ascii.h"

static const char hexd[] = "0123456789abcdef";

/* HMAC-SHA256 (RFC 2104) with the key schedule made once: the states after the inner
 * and the outer padded keys, which each MAC copies instead of hashing the key again. The
 * states are OpenSSL's plain SHA256_CTX (deprecated in 3.0, still shipped), because a
 * copy of one is a struct assignment, where an EVP_MD_CTX copy allocates a provider
 * context: a MAC costs a third of the EVP version's instructions. The templates are only
 * read after creation, so any thread may use them. */
struct um_cluster_mac {
    SHA256_CTX inner, outer;
};

struct um_cluster_mac *um_cluster_mac_create(const char *secret)
{
    struct um_cluster_mac *m = um_calloc(1, sizeof(*m));
    unsigned char k[64] = {0}, ipad[64], opad[64];
    size_t kl = strlen(secret);
    if (kl > sizeof k)
        SHA256((const unsigned char *)secret, kl, k);
    else
        memcpy(k, secret, kl);
    for (size_t i = 0; i < sizeof k; i++) {
        ipad[i] = k[i] ^ 0x36;
        opad[i] = k[i] ^ 0x5c;
    }
    UM_ASSERT(SHA256_Init(&m->inner) == 1 && SHA256_Update(&m->inner, ipad, sizeof ipad) == 1 &&
              SHA256_Init(&m->outer) == 1 && SHA256_Update(&m->outer, opad, sizeof opad) == 1);
    OPENSSL_cleanse(k, sizeof k);
    OPENSSL_cleanse(ipad, sizeof ipad);
    OPENSSL_cleanse(opad, sizeof opad);
    return m;
}

void um_cluster_mac_destroy(struct um_cluster_mac *m)
{
    if (m == NULL) return;
    OPENSSL_cleanse(m, sizeof(*m));
    free(m);
}

/* The MAC of (method, target, key, ts) into mac (32 bytes). */
static void mac_of(const struct um_cluster_mac *m, um_str method, um_str target, um_str key,
                   int64_t ts, unsigned char *mac)
{
    char tsb[20];
    size_t tl = (size_t)(um_u64_dec(tsb, (uint64_t)ts) - tsb); /* ts >= 0: now, or digits */
    unsigned char inner[SHA256_DIGEST_LENGTH];
    SHA256_CTX w = m->inner;
    SHA256_Update(&w, method.base, method.len);
    SHA256_Update(&w, " ", 1);
    SHA256_Update(&w, target.base, target.len);
    SHA256_Update(&w, "\n", 1);
    if (key.len) SHA256_Update(&w, key.base, key.len);
    SHA256_Update(&w, "\n", 1);
    SHA256_Update(&w, tsb, tl);
    SHA256_Final(inner, &w);
    w = m->outer;
    SHA256_Update(&w, inner, sizeof inner);
    SHA256_Final(mac, &w);
    OPENSSL_cleanse(&w, sizeof w);
}

size_t um_cluster_sign_len(size_t klen)
{
    return sizeof("ts=, key=, sig=") + 24 + 2 * klen + 64;
}

size_t um_cluster_sign(const struct um_cluster_mac *secret, um_str method, um_str target,
                       um_str key, int64_t now, char *out, size_t outsz)
{
    unsigned char mac[32];
    if (outsz < um_cluster_sign_len(key.len)) return 0;
    mac_of(secret, method, target, key, now, mac);
    memcpy(out, "ts=", 3);
    size_t p = (size_t)(um_u64_dec(out + 3, (uint64_t)now) - out);
    memcpy(out + p, ", key=", 6);
    p += 6;
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
        int a = um_hexval(hk.base[2 * i]), b = um_hexval(hk.base[2 * i + 1]);
        if (a < 0 || b < 0) return false;
        key[i] = (char)(a << 4 | b);
    }
    unsigned char want[32], got[32];
    for (size_t i = 0; i < 32; i++) {
        int a = um_hexval(sig.base[2 * i]), b = um_hexval(sig.base[2 * i + 1]);
        if (a < 0 || b < 0) return false;
        got[i] = (unsigned char)(a << 4 | b);
    }
    mac_of(secret, method, target, (um_str){key, hk.len / 2}, t, want);
    if (CRYPTO_memcmp(want, got, 32) != 0) return false;
    *klen = hk.len / 2;
    return true;
}
