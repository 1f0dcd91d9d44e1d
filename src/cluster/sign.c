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
#include <openssl/hmac.h>

#include "umbra/cluster.h"

static const char hexd[] = "0123456789abcdef";

static int unhex(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The MAC of (method, target, key, ts) into mac (32 bytes). */
static bool mac_of(const char *secret, um_str method, um_str target, um_str key, int64_t ts,
                   unsigned char *mac)
{
    char tsb[24];
    int tl = snprintf(tsb, sizeof tsb, "%lld", (long long)ts);
    size_t n = method.len + 1 + target.len + 1 + key.len + 1 + (size_t)tl;
    char stackbuf[1024];
    char *msg = n <= sizeof stackbuf ? stackbuf : malloc(n);
    if (msg == NULL) return false;
    size_t o = 0;
    memcpy(msg + o, method.base, method.len);
    o += method.len;
    msg[o++] = ' ';
    memcpy(msg + o, target.base, target.len);
    o += target.len;
    msg[o++] = '\n';
    if (key.len) memcpy(msg + o, key.base, key.len);
    o += key.len;
    msg[o++] = '\n';
    memcpy(msg + o, tsb, (size_t)tl);
    o += (size_t)tl;
    unsigned int ml = 0;
    unsigned char *r =
        HMAC(EVP_sha256(), secret, (int)strlen(secret), (const unsigned char *)msg, o, mac, &ml);
    if (msg != stackbuf) free(msg);
    return r != NULL && ml == 32;
}

size_t um_cluster_sign_len(size_t klen)
{
    return sizeof("ts=, key=, sig=") + 24 + 2 * klen + 64;
}

size_t um_cluster_sign(const char *secret, um_str method, um_str target, um_str key, int64_t now,
                       char *out, size_t outsz)
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

bool um_cluster_verify(const char *secret, um_str method, um_str target, um_str v, int64_t now,
                       char *key, size_t keysz, size_t *klen)
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
