/* Unit tests for src/cache/tags.c: surrogate keys on stored objects, the tag index's
 * memory (charged against the cap, all given back), and the purges by tag, by prefix and
 * soft. Single-threaded, through the store's public interface. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "umbra/cache.h"

static um_str S(const char *s)
{
    return (um_str){s, strlen(s)};
}

static struct um_cache *mk(size_t cap)
{
    struct um_cache_opts o = {.memory_cap = cap, .shards = 4};
    return um_cache_create(&o);
}

/* A complete object with key and tags (a NULL-terminated list); the caller's reference is
 * given back, so the index holds the only one. */
static void put(struct um_cache *c, const char *key, const char *const *tags)
{
    struct um_cache_obj *o = um_cache_insert(c, S(key), NULL, 0);
    assert_non_null(o);
    um_str t[16];
    size_t n = 0;
    for (; tags[n] != NULL; n++)
        t[n] = S(tags[n]);
    assert_int_equal(um_cache_obj_set_tags(o, t, n), UM_OK);
    assert_int_equal(um_cache_obj_set_head(o, "m", 1, "h", 1), UM_OK);
    assert_int_equal(um_cache_obj_append(o, "body", 4), UM_OK);
    um_cache_obj_finish(o, true);
    um_cache_obj_unref(o);
}

#define TAGS(...) ((const char *const[]){__VA_ARGS__, NULL})

static bool present(struct um_cache *c, const char *key)
{
    struct um_cache_obj *o = um_cache_lookup(c, S(key), NULL, NULL);
    if (o)
        um_cache_obj_unref(o);
    return o != NULL;
}

static void test_purge_tags_and_memory(void **state)
{
    (void)state;
    struct um_cache *c = mk(1 << 20);
    size_t empty = um_cache_memory_used(c);
    /* The tag index's table is made by the first tag, and counted. */
    put(c, "h /warm", TAGS("w"));
    assert_int_equal(um_cache_purge_tags(c, (um_str[]){S("w")}, 1, 0), 1);
    size_t base = um_cache_memory_used(c);
    assert_true(base > empty);
    put(c, "h /a", TAGS("t1", "shared"));
    put(c, "h /b", TAGS("t2", "shared", "shared")); /* a repeat is kept once */
    put(c, "h /c", TAGS("t3"));
    assert_int_equal(um_cache_tag_count(c), 4);
    size_t with = um_cache_memory_used(c);
    /* Several tags of one object: counted once. */
    assert_int_equal(um_cache_purge_tags(c, (um_str[]){S("t1"), S("shared")}, 2, 0), 2);
    assert_false(present(c, "h /a"));
    assert_false(present(c, "h /b"));
    assert_true(present(c, "h /c"));
    assert_int_equal(um_cache_tag_count(c), 1); /* nodes go with their last object */
    assert_true(um_cache_memory_used(c) < with);
    assert_int_equal(um_cache_purge_tags(c, (um_str[]){S("nothing")}, 1, 0), 0);
    assert_int_equal(um_cache_purge_tags(c, (um_str[]){S("t3")}, 1, 0), 1);
    assert_int_equal(um_cache_tag_count(c), 0);
    assert_int_equal(um_cache_memory_used(c), base);
    um_cache_destroy(c);
}

static void test_bounds(void **state)
{
    (void)state;
    struct um_cache *c = mk(1 << 20);
    struct um_cache_obj *o = um_cache_insert(c, S("h /many"), NULL, 0);
    char names[200][8];
    um_str t[200];
    for (int i = 0; i < 200; i++) {
        snprintf(names[i], sizeof names[i], "k%d", i);
        t[i] = S(names[i]);
    }
    /* The documented limits (README: "at most 64 tags of 256 bytes"), written as numbers
     * rather than the code's constants, so that a change of the constants fails here. */
    char longtag[257 + 1], fulltag[256 + 1];
    memset(longtag, 'x', 257);
    longtag[257] = '\0';
    memset(fulltag, 'y', 256);
    fulltag[256] = '\0';
    t[0] = S(longtag);  /* 257 bytes, too long: skipped */
    t[1] = S("a\x01b"); /* a control byte: skipped */
    t[2] = S(fulltag);  /* 256 bytes: kept */
    assert_int_equal(um_cache_obj_set_tags(o, t, 200), UM_OK);
    um_str out[65];
    assert_int_equal(um_cache_obj_tags(o, out, UM_NELEMS(out)), 64);
    assert_int_equal(out[0].len, 256);
    assert_true(um_str_eq(out[0], fulltag));
    assert_true(um_str_eq(out[1], "k3"));
    assert_true(um_str_eq(out[63], "k65"));
    um_cache_obj_finish(o, false);
    um_cache_obj_unref(o);
    assert_int_equal(um_cache_tag_count(c), 0);
    um_cache_destroy(c);
}

/* Issue #26: the README's "at most 64 tags of 256 bytes", in its numbers: the 64th tag
 * is kept (a purge by it finds the object), the 65th is not; a tag of 256 bytes is kept,
 * one of 257 is not. */
static void test_readme_64_tags_of_256_bytes(void **state)
{
    (void)state;
    struct um_cache *c = mk(1 << 20);
    struct um_cache_obj *o = um_cache_insert(c, S("h /limits"), NULL, 0);
    char names[65][8], t256[257], t257[258];
    um_str t[67];
    for (int i = 0; i < 65; i++) {
        snprintf(names[i], sizeof names[i], "n%d", i + 1);
        t[i] = S(names[i]);
    }
    memset(t256, 'a', 256);
    t256[256] = '\0';
    memset(t257, 'b', 257);
    t257[257] = '\0';
    /* The long tags first, so that they fall within the 64 kept. */
    um_str all[67] = {S(t257), S(t256)};
    memcpy(all + 2, t, 65 * sizeof t[0]);
    assert_int_equal(um_cache_obj_set_tags(o, all, 67), UM_OK);
    assert_int_equal(um_cache_obj_set_head(o, "m", 1, "h", 1), UM_OK);
    um_cache_obj_finish(o, true);
    um_str out[70];
    size_t n = um_cache_obj_tags(o, out, 70);
    um_cache_obj_unref(o);
    assert_int_equal(n, 64); /* t256 and n1..n63 */
    assert_int_equal(out[0].len, 256);
    assert_true(um_str_eq(out[63], "n63"));
    assert_int_equal(um_cache_purge_tags(c, (um_str[]){S("n64")}, 1, 0), 0);
    assert_int_equal(um_cache_purge_tags(c, (um_str[]){S(t257)}, 1, 0), 0);
    assert_true(present(c, "h /limits"));
    assert_int_equal(um_cache_purge_tags(c, (um_str[]){S(t256)}, 1, 0), 1);
    assert_false(present(c, "h /limits"));

    /* Exactly 64 short tags: the 64th is kept. */
    o = um_cache_insert(c, S("h /sixty-four"), NULL, 0);
    assert_int_equal(um_cache_obj_set_tags(o, t, 64), UM_OK);
    assert_int_equal(um_cache_obj_set_head(o, "m", 1, "h", 1), UM_OK);
    um_cache_obj_finish(o, true);
    um_cache_obj_unref(o);
    assert_int_equal(um_cache_purge_tags(c, (um_str[]){S("n64")}, 1, 0), 1);
    um_cache_destroy(c);
}

static void test_soft_purge_and_held_objects(void **state)
{
    (void)state;
    struct um_cache *c = mk(1 << 20);
    put(c, "h /s", TAGS("soft"));
    assert_int_equal(um_cache_purge_tags(c, (um_str[]){S("soft")}, 1, UM_CACHE_PURGE_SOFT), 1);
    struct um_cache_obj *o = um_cache_lookup(c, S("h /s"), NULL, NULL);
    assert_non_null(o); /* still there, marked */
    assert_true(um_cache_obj_marked_stale(o));
    /* A hard purge while a reader holds it: unlinked, its tags live until the last unref. */
    assert_int_equal(um_cache_purge_tags(c, (um_str[]){S("soft")}, 1, 0), 1);
    assert_int_equal(um_cache_tag_count(c), 1);
    assert_int_equal(um_cache_purge_tags(c, (um_str[]){S("soft")}, 1, 0), 0);
    um_cache_obj_unref(o);
    assert_int_equal(um_cache_tag_count(c), 0);
    /* Refresh claims: one at a time. */
    put(c, "h /r", TAGS("r"));
    o = um_cache_lookup(c, S("h /r"), NULL, NULL);
    assert_true(um_cache_obj_claim_refresh(o));
    assert_false(um_cache_obj_claim_refresh(o));
    um_cache_obj_release_refresh(o);
    assert_true(um_cache_obj_claim_refresh(o));
    um_cache_obj_unref(o);
    /* Soft purge of a key. */
    assert_int_equal(um_cache_purge_soft(c, S("h /r")), 1);
    assert_int_equal(um_cache_purge_soft(c, S("h /none")), 0);
    um_cache_destroy(c);
}

static void test_purge_prefix(void **state)
{
    (void)state;
    struct um_cache *c = mk(1 << 20);
    put(c, "h /p/1", TAGS("x"));
    put(c, "h /p/2?q", TAGS("x"));
    put(c, "h /q/1", TAGS("x"));
    put(c, "g /p/3", TAGS("x"));
    assert_int_equal(um_cache_purge_prefix(c, S("h"), S("/p/"), 0), 2);
    assert_true(present(c, "h /q/1"));
    assert_true(present(c, "g /p/3"));
    assert_int_equal(um_cache_purge_prefix(c, (um_str){NULL, 0}, S("/"), UM_CACHE_PURGE_SOFT), 2);
    assert_int_equal(um_cache_purge_prefix(c, (um_str){NULL, 0}, S("/"), 0), 2);
    assert_int_equal(um_cache_object_count(c), 0);
    um_cache_destroy(c);
}

static void test_tags_under_a_small_cap(void **state)
{
    (void)state;
    /* Tagging many objects in a small store: eviction makes room, nothing leaks, the cap
     * holds (destroy asserts every byte was given back). */
    struct um_cache *c = mk(1 << 20);
    char key[32], tag[32];
    for (int i = 0; i < 20000; i++) {
        snprintf(key, sizeof key, "h /%d", i);
        snprintf(tag, sizeof tag, "tag-%d", i % 5000);
        put(c, key, TAGS(tag, "all"));
        assert_true(um_cache_memory_used(c) <= (1 << 20));
    }
    size_t n = um_cache_object_count(c);
    assert_true(n > 0 && n < 20000);
    /* Paced (as the admin thread purges): the same result. */
    assert_int_equal(um_cache_purge_tags(c, (um_str[]){S("all")}, 1, UM_CACHE_PURGE_PACED), n);
    assert_int_equal(um_cache_tag_count(c), 0);
    um_cache_destroy(c);
}

/* Threads: fillers tag objects in a small store (so eviction frees tagged objects on any
 * thread), readers look them up and read their tags, purgers purge by tag, hard and soft,
 * and by prefix, all at once, for a bounded number of rounds. Checked: no crash (and, under
 * TSan, no race), the cap holds, every byte is given back at destroy. */
#define STRESS_ROUNDS 3000

static void *stress_filler(void *arg)
{
    struct um_cache *c = arg;
    char key[32], tag[16];
    for (int i = 0; i < STRESS_ROUNDS; i++) {
        snprintf(key, sizeof key, "h /%d", i % 500);
        snprintf(tag, sizeof tag, "t%d", i % 7);
        struct um_cache_obj *o = um_cache_insert(c, S(key), NULL, 0);
        if (o == NULL)
            continue;
        um_str t[2] = {S(tag), S("all")};
        if (um_cache_obj_set_tags(o, t, 2) == UM_OK &&
            um_cache_obj_set_head(o, "m", 1, "h", 1) == UM_OK &&
            um_cache_obj_append(o, "0123456789abcdef0123456789abcdef", 32) == UM_OK)
            um_cache_obj_finish(o, true);
        else
            um_cache_obj_finish(o, false);
        um_cache_obj_unref(o);
        assert_true(um_cache_memory_used(c) <= (256 << 10));
    }
    return NULL;
}

static void *stress_reader(void *arg)
{
    struct um_cache *c = arg;
    char key[32];
    for (int i = 0; i < STRESS_ROUNDS * 2; i++) {
        snprintf(key, sizeof key, "h /%d", i % 500);
        struct um_cache_obj *o = um_cache_lookup(c, S(key), NULL, NULL);
        if (o == NULL)
            continue;
        um_str meta, head, tags[4];
        if (um_cache_obj_head(o, &meta, &head)) {
            size_t n = um_cache_obj_tags(o, tags, 4);
            assert_true(n == 2 && um_str_eq(tags[1], "all"));
        }
        (void)um_cache_obj_marked_stale(o);
        if (um_cache_obj_claim_refresh(o))
            um_cache_obj_release_refresh(o);
        um_cache_obj_unref(o);
    }
    return NULL;
}

static void *stress_purger(void *arg)
{
    struct um_cache *c = arg;
    char tag[16];
    for (int i = 0; i < STRESS_ROUNDS / 10; i++) {
        snprintf(tag, sizeof tag, "t%d", i % 7);
        unsigned flags = i % 3 == 0 ? UM_CACHE_PURGE_SOFT : 0;
        (void)um_cache_purge_tags(c, (um_str[]){S(tag)}, 1, flags);
        if (i % 10 == 0)
            (void)um_cache_purge_prefix(c, S("h"), S("/1"), 0);
        if (i % 10 == 5)
            (void)um_cache_purge_soft(c, S("h /7"));
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    struct um_cache *c = mk(256 << 10);
    pthread_t th[4];
    void *(*fn[4])(void *) = {stress_filler, stress_filler, stress_reader, stress_purger};
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL, fn[i], c), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    (void)um_cache_purge_tags(c, (um_str[]){S("all")}, 1, 0);
    assert_int_equal(um_cache_tag_count(c), 0);
    um_cache_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_purge_tags_and_memory),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_readme_64_tags_of_256_bytes),
        cmocka_unit_test(test_soft_purge_and_held_objects),
        cmocka_unit_test(test_purge_prefix),
        cmocka_unit_test(test_tags_under_a_small_cap),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
